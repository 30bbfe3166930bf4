"""Every config key, preset, alias and command-line flag a user could type before the reorganisation of the
source tree (issue 50) is still accepted: the list in ``interface.json`` was written from the tree before any
module moved, and this test reads the same things from today's tree. Adding keys or flags is fine; losing or
renaming one fails here.

Rewrite the list (only for a deliberate interface change): ``python tests/test_interface_kept.py --write``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

LIST = Path(__file__).with_name("interface.json")


def _flags(parser: argparse.ArgumentParser, path: str, out: dict[str, list[str]]) -> None:
    """Command path -> its option strings and positional names, for this parser and every subcommand below it."""
    names: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for word, sub in action.choices.items():
                _flags(sub, f"{path} {word}".strip(), out)
        elif action.option_strings:
            names += action.option_strings
        else:
            names.append(f"<{action.dest}>")
    out[path or "distlab"] = sorted(set(names))


def interface() -> dict:
    """The user-facing names: config keys, presets and aliases of every recipe, and every command's flags."""
    from distlab.cli import build_parser, config_rows, declared_commands
    from distlab.recipe import load_recipe, recipe_names

    recipes = {}
    for name in recipe_names():
        recipe = load_recipe(name)
        presets = sorted(p.stem for p in recipe.presets_dir.glob("*.yaml")) if recipe.presets_dir else []
        recipes[name] = {"keys": sorted(r[0] for r in config_rows(recipe.config)), "presets": presets,
                         "aliases": dict(sorted(recipe.aliases.items()))}
    flags: dict[str, list[str]] = {}
    for command in ["", *declared_commands()]:  # a declared command loads only what declares it (data tasks)
        _flags(build_parser(command), "", flags)
    return {"recipes": recipes, "commands": dict(sorted(flags.items()))}


def _missing(before: dict, now: dict) -> list[str]:
    lost = []
    for name, old in before["recipes"].items():
        new = now["recipes"].get(name)
        if new is None:
            lost.append(f"recipe {name}")
            continue
        lost += [f"{name} key {k}" for k in old["keys"] if k not in new["keys"]]
        lost += [f"{name} preset {p}" for p in old["presets"] if p not in new["presets"]]
        lost += [f"{name} alias {a} -> {k}" for a, k in old["aliases"].items() if new["aliases"].get(a) != k]
    for command, old in before["commands"].items():
        new = now["commands"].get(command)
        if new is None:
            lost.append(f"command '{command}'")
            continue
        lost += [f"'{command}' flag {f}" for f in old if f not in new]
    return lost


def test_every_key_and_flag_is_still_accepted() -> None:
    before = json.loads(LIST.read_text())
    assert len(before["commands"]) > 20 and all(r["keys"] for r in before["recipes"].values())
    assert _missing(before, interface()) == []


def test_the_check_sees_a_lost_key_and_a_lost_flag() -> None:
    before = json.loads(LIST.read_text())
    now = json.loads(LIST.read_text())
    name = sorted(now["recipes"])[0]
    key = now["recipes"][name]["keys"].pop()
    flag = now["commands"]["train"].pop()
    assert sorted(_missing(before, now)) == sorted([f"{name} key {key}", f"'train' flag {flag}"])


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    LIST.write_text(json.dumps(interface(), indent=1) + "\n")
