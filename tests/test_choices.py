"""Config choices, the core's as much as the recipes', are ``Choice`` members: equal to the word the user wrote and
printed as it, so no reader of a setting unwraps it by hand."""

from __future__ import annotations

import ast
import enum
from pathlib import Path

import distlab
import distlab.config as config
from distlab.choices import Choice

SRC = Path(distlab.__file__).parent
CORE_ENUMS = [obj for obj in vars(config).values()
              if isinstance(obj, type) and issubclass(obj, enum.Enum) and obj.__module__ == config.__name__]


def test_every_core_enum_is_a_choice_printed_as_its_word():
    assert {c.__name__ for c in CORE_ENUMS} >= {"Resume", "Wrap", "Precision", "CompileMode", "StateDtype",
                                                "ActivationCheckpointing", "CommHook", "BatchScale", "LrScale"}
    for cls in CORE_ENUMS:
        assert issubclass(cls, Choice), cls
        for member in cls:
            assert member == member.value
            assert str(member) == f"{member}" == member.value
            assert f"{member:>20}" == f"{member.value:>20}"


def test_a_resolved_config_reads_as_plain_words():
    """What a recipe, the doctor or a message reads from a resolved config: the word, with no ``.value``."""
    from distlab.config import resolve_config
    from distlab.recipe import adam_state_key, load_recipe

    cfg = resolve_config(load_recipe("toy"), [], ["dist.wrap=fsdp", "dist.compile=true",
                                                  "dist.compile_mode=reduce-overhead", "optim.state_dtype=bf16"])
    assert f"{cfg.dist.wrap}/{cfg.dist.compile_mode}" == "fsdp/reduce-overhead"
    assert adam_state_key(cfg.optim.state_dtype) == "adam_bf16"
    assert "dist.precision=fp32" in f"dist.precision={cfg.dist.precision}"


def _unwraps_by_hand(tree: ast.AST) -> list[int]:
    """Lines of ``getattr(x, "value", x)``: the hand unwrapping a ``(str, Enum)`` setting once needed."""
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) == 3 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "value"]


def test_no_setting_is_unwrapped_by_hand():
    found = {str(p.relative_to(SRC)): lines for p in sorted(SRC.rglob("*.py"))
             if (lines := _unwraps_by_hand(ast.parse(p.read_text())))}
    assert found == {}, f"read the setting itself (a Choice is its word): {found}"
