"""`trm-sudoku-380s` is `trm-sudoku` with only the budget run's data, time limit, training depth and test-time
sampling changed: the published preset stays as published, and the budget preset is the configuration measured
with 3 seeds (docs/benchmarks.md)."""

from __future__ import annotations

from dataclasses import asdict

from distlab.config import resolve_config
from distlab.recipe import load_recipe


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def test_the_budget_preset_changes_only_data_time_and_evaluation():
    recipe = load_recipe("hrm")
    published = _flat(asdict(resolve_config(recipe, ["trm-sudoku"], [])))
    budget = _flat(asdict(resolve_config(recipe, ["trm-sudoku-380s"], [])))
    changed = {k for k in published if published[k] != budget[k]} - {"run.name"}
    assert changed == {"data.path", "data.build", "data.num_aug", "data.workers", "run.time_limit_s", "steps",
                       "lr_warmup_steps", "dist.compile", "log.every", "eval.samples", "arch.curriculum"}
    # trains at 1 outer cycle for the whole budget, evaluates at the published 3
    assert (budget["arch.curriculum"], budget["arch.H_cycles"], published["arch.curriculum"]) == ("0:1", 3, "")
    assert budget["eval.samples"] == 16 and budget["eval.select"] == "q" and budget["run.time_limit_s"] == 380
    assert (published["data.path"], published["eval.samples"]) == ("data/sudoku-extreme-1k-aug-1000", 1)
