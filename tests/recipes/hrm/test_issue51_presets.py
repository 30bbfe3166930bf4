"""Issue 51's candidate presets: each is its base preset with only the stated changes (the old presets stay as they
are), evaluates with `trm-sudoku-380s`'s test-time sampling (the maze preset at 8 trajectories), validates for 4
processes, and trains a few steps at tiny size on 2 CPU processes (sizes overridden; compilation is a GPU matter and
is off here)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from distlab.config import resolve_config
from distlab.recipe import load_recipe

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from clitools import run_cli  # noqa: E402

TINY = ["data.train_size=32", "data.test_size=8", "data.num_aug=1", "data.workers=1", "data.blanks=10",
        "global_batch_size=8", "steps=3", "log.every=1", "arch.hidden_size=32", "arch.num_heads=2",
        "arch.L_layers=1", "arch.H_cycles=2", "arch.L_cycles=2", "arch.halt_max_steps=3", "arch.puzzle_emb_ndim=32",
        "arch.forward_dtype=float32", "dist.compile=false", "dist.compile_mode=default",
        "dist.compile_split_ddp=true"]
SIZE = {"hrm": ["arch.H_layers=1"], "trm": ["arch.puzzle_emb_len=2"]}


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _preset(name: str) -> dict:
    return _flat(asdict(resolve_config(load_recipe("hrm"), [name], [])))


def _changed(base: str, new: str) -> set[str]:
    a, b = _preset(base), _preset(new)
    return {k for k in a if a[k] != b[k]} - {"run.name"}


def test_trm_4gpu_preset_is_the_380s_preset_with_cuda_graphs_and_one_evaluation():
    assert _changed("trm-sudoku-380s", "trm-sudoku-4gpu-380s") == {"eval_every", "dist.compile_mode",
                                                                   "dist.compile_split_ddp"}
    p = _preset("trm-sudoku-4gpu-380s")
    assert (p["eval_every"], p["dist.compile_mode"].name, p["dist.compile_split_ddp"]) == (0, "reduce_overhead", False)
    assert (p["global_batch_size"], p["run.time_limit_s"]) == (768, 380)


def test_hrm_budget_preset_is_sudoku_extreme_1k_with_the_budget_data_and_sampling():
    assert _changed("sudoku-extreme-1k", "hrm-sudoku-380s") == {
        "data.path", "data.build", "data.num_aug", "data.workers", "run.time_limit_s", "steps", "lr_warmup_steps",
        "eval_every", "eval.samples", "dist.compile", "dist.compile_mode", "dist.compile_split_ddp", "log.every"}
    hrm, trm = _preset("hrm-sudoku-380s"), _preset("trm-sudoku-380s")
    same = [k for k in trm if k.startswith(("eval.", "data.")) or k == "run.time_limit_s"]
    assert {k: hrm[k] for k in same} == {k: trm[k] for k in same}  # equal data, budget and test-time sampling
    assert hrm["eval.samples"] == 16 and hrm["arch.name"] == "hrm"


def test_maze_preset_is_trm_maze_with_the_4gpu_budget_settings_and_8_trajectories():
    assert _changed("trm-maze", "trm-maze-4gpu-380s") == {
        "data.path", "data.build", "data.num_aug", "run.time_limit_s", "steps", "lr_warmup_steps", "eval_every",
        "eval.samples", "dist.compile", "dist.compile_mode", "dist.compile_split_ddp", "log.every"}
    maze, sudoku = _preset("trm-maze-4gpu-380s"), _preset("trm-sudoku-4gpu-380s")
    same = [k for k in sudoku if k.startswith(("eval.", "dist.", "run.", "lr")) or k in (
        "steps", "eval_every", "global_batch_size", "ema", "data.train_size", "data.test_size")]
    assert {k: maze[k] for k in same} == {**{k: sudoku[k] for k in same}, "eval.samples": 8}
    assert (maze["data.build"], maze["data.num_aug"], maze["data.min_difficulty"]) == ("maze", 8, -1)  # Maze-Hard
    assert (maze["arch.name"], maze["arch.mlp_t"], maze["arch.L_cycles"]) == ("trm", False, 4)  # attention, as trm-maze


@pytest.mark.parametrize("preset", ["trm-sudoku-4gpu-380s", "hrm-sudoku-380s", "trm-maze-4gpu-380s"])
def test_preset_validates_for_four_processes_as_shipped(tmp_path, preset):
    proc = run_cli(["train", "hrm", "--config", preset, "--dry-run", "--procs", "4"], tmp_path)
    assert "compile_mode: reduce_overhead" in proc.stdout and "time_limit_s: 380.0" in proc.stdout


@pytest.mark.parametrize(("preset", "samples"), [("trm-sudoku-4gpu-380s", 16), ("hrm-sudoku-380s", 16),
                                                 ("trm-maze-4gpu-380s", 8)])
def test_preset_trains_a_few_steps_at_tiny_size(tmp_path, preset, samples):
    arch = "trm" if preset.startswith("trm") else "hrm"
    run_cli(["train", "hrm", "--config", preset, *TINY, *SIZE[arch], "run.name=t", "--procs", "2"], tmp_path)
    summary = json.loads((tmp_path / "runs" / "t" / "summary.json").read_text())
    assert (summary["status"], summary["step"], summary["world_size"]) == ("completed", 3, 2)
    ev = summary["eval"]
    assert ev["count"] == 8 and ev["samples"] == samples and ev["sample_select"] == "q"  # the preset's own sampling
    assert 0.0 <= ev["sampled_exact_accuracy"] <= ev["sampled_oracle_exact_accuracy"] <= 1.0
