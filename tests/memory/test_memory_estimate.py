"""Memory arithmetic lives below its readers: the out-of-memory report and the doctor give the same numbers."""

import ast
from pathlib import Path

import pytest

from distlab.config import resolve_config
from distlab.memory.estimate import estimate_memory, recipe_specs
from distlab.memory.oom import estimate_text
from distlab.recipe import ModelSpec, load_recipe

SRC = Path(__file__).resolve().parents[2] / "src" / "distlab"


def _imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | \
        {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}


def test_no_core_module_reaches_up_into_the_doctor():
    # the entry points are the top of the package: cli.py registers the doctor's command, and api.py (the
    # command as a Python function) applies the same memory check before a run; both may import anything
    up = [p.name for p in SRC.glob("*.py") if p.name not in ("cli.py", "api.py")
          if any(m.startswith("distlab.doctor") for m in _imported(p))]
    assert up == []


def test_oom_report_and_doctor_count_the_same_bytes():
    recipe = load_recipe("toy")
    cfg = resolve_config(recipe, [], ["optim.state_dtype=int8", "d_model=128"])
    spec = recipe_specs(recipe, cfg)
    assert isinstance(spec, ModelSpec) and spec.optimizer == "adam_int8"  # state counted at 2 bytes/param
    from distlab.doctor import recipe_model_spec

    assert recipe_model_spec("toy", ["optim.state_dtype=int8", "d_model=128"], []) == spec
    total = estimate_memory(spec, world_size=2).total / 2**30
    assert f"estimates {total:.1f} GiB per device" in estimate_text(recipe, cfg, world_size=2)


def test_a_recipe_without_a_memory_model_gives_no_estimate():
    recipe = load_recipe("ppo")
    assert recipe.model_spec is None
    assert recipe_specs(recipe, None) is None and estimate_text(recipe, None, 1) == ""


def test_fsdp_divides_the_static_part_only():
    spec = ModelSpec("m", params=1000, activation_bytes_per_example=10, batch_per_device=4)
    ddp, fsdp = estimate_memory(spec, world_size=4), estimate_memory(spec, strategy="fsdp", world_size=4)
    assert (ddp.params, ddp.grads, ddp.optimizer, ddp.activations) == (4000, 4000, 8000, 40)
    assert (fsdp.params, fsdp.grads, fsdp.optimizer, fsdp.activations) == (1000, 1000, 2000, 40)
    assert fsdp.total == pytest.approx(4040)


def test_the_out_of_memory_line_states_a_capped_process_share(monkeypatch):
    """Under torch.cuda.set_per_process_memory_fraction (a smaller card imitated) the line says what this process
    may use, not the whole card."""
    from types import SimpleNamespace

    import distlab.memory.oom as oom

    cuda = SimpleNamespace(is_available=lambda: True, current_device=lambda: 0,
                           get_device_properties=lambda i: SimpleNamespace(total_memory=140 * 2**30),
                           get_per_process_memory_fraction=lambda i: 0.25)
    monkeypatch.setattr(oom.torch, "cuda", cuda)
    assert oom.device_text() == "cuda:0 allows this process 35.0 of its 140.0 GiB"
    cuda.get_per_process_memory_fraction = lambda i: 1.0
    assert oom.device_text() == "cuda:0 has 140.0 GiB"
