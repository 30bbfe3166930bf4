"""Reports show the metrics the runs' recipe declares (``Recipe.report_metrics``), never a built-in list.

A recipe outside distlab is registered the way a user's package would do it: an entry point in a
``.dist-info`` folder on ``sys.path``.
"""

from __future__ import annotations

import io
import json
import math
import sys
from pathlib import Path

import pytest

from distlab.errors import DistlabError
from distlab.suite.report import build_report

FAKE_RECIPE = '''
from dataclasses import dataclass

from distlab.recipe import Recipe


@dataclass
class Config:
    pass


RECIPE = Recipe(name="fakegrpo", config=Config, train=lambda cfg, session: {},
                report_metrics=("pass@1", "pass@8", "mean_reward"), percent_metrics=("pass@1", "pass@8"),
                steps_key="train.total_steps")
'''
PASS1 = {"base": [0.2, 0.3], "big": [0.5, 0.6]}


@pytest.fixture
def fake_recipe(tmp_path, monkeypatch):
    """Install ``fakegrpo`` through an entry point, as ``pip install`` of another package would."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "fake_grpo_recipe.py").write_text(FAKE_RECIPE)
    info = site / "fake_grpo_recipe-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-grpo-recipe\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[distlab.recipes]\nfakegrpo = fake_grpo_recipe:RECIPE\n")
    monkeypatch.syspath_prepend(str(site))
    yield "fakegrpo"
    sys.modules.pop("fake_grpo_recipe", None)


def make_run(root: Path, exp: str, seed: int, recipe: str | None, final: dict[str, float]) -> Path:
    """A finished run whose eval metric ramps linearly to ``final`` over steps 10, 20, 30."""
    run = root / exp / f"seed{seed}"
    run.mkdir(parents=True)
    rows = [{"step": s, "split": "eval", "time_s": s / 10, "gpu_seconds": s / 2, "flops": s * 1e9,
             **{k: v * s / 30 for k, v in final.items()}} for s in (10, 20, 30)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "manifest.json").write_text(json.dumps({"recipe": recipe} if recipe else {}))
    (run / "summary.json").write_text(json.dumps({"status": "completed", "eval": final}))
    return run


def grpo_suite(root: Path, recipe: str | None) -> Path:
    for exp, finals in PASS1.items():
        for seed, p1 in enumerate(finals):
            # exact_accuracy/token_accuracy are logged too: the report must not pick them up because HRM has them
            make_run(root, exp, seed, recipe, {"pass@1": p1, "pass@8": min(1.0, 2 * p1), "mean_reward": 3 * p1,
                                               "exact_accuracy": 0.01, "token_accuracy": 0.02})
    (root / "suite.yaml").write_text("name: grpo\nbaseline: base\nexperiments: {base: {}, big: {}}\n")
    return root


def _table_header(md: str) -> list[str]:
    line = next(ln for ln in md.splitlines() if ln.startswith("| experiment | seeds"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_report_shows_the_metrics_the_recipe_declares(tmp_path, fake_recipe):
    suite = grpo_suite(tmp_path / "grpo", fake_recipe)
    md = build_report(suite, tmp_path / "rep", thresholds=(0.25, 0.5)).read_text()
    data = json.loads((tmp_path / "rep" / "report.json").read_text())
    shown = data["report_metrics"]
    assert shown["names"] == ["pass@1", "pass@8", "mean_reward"] and shown["primary"] == "pass@1"
    assert shown["percent"] == ["pass@1", "pass@8"] and "fakegrpo" in shown["source"]
    big = data["experiments"]["big"]
    assert set(big["metrics"]) == {"pass@1", "pass@8", "mean_reward"}
    assert big["metrics"]["pass@1"]["mean"] == pytest.approx(0.55)
    assert set(big["tests"]) == {"pass@1", "pass@8", "mean_reward"}
    # milestones and cost follow the primary metric: both seeds reach pass@1 0.5 at step 30, neither before
    assert big["efficiency"]["0.5"]["reached"] == 2 and big["efficiency"]["0.5"]["step"]["mean"] == 30
    assert big["cost"]["flops_per_point"]["mean"] == pytest.approx(sum(30e9 / (100 * p) for p in PASS1["big"]) / 2)
    assert _table_header(md) == ["experiment", "seeds", "pass@1 (%)", "pass@8 (%)", "mean_reward",
                                 "Δ pass@1 vs baseline (pp)", "p (pass@1)", "significant (Holm)"]
    assert "| big | 2 | 55.00 ±" in md and "| +30.00 |" in md
    assert "1.65 ±" in md                                    # mean_reward is no fraction: raw, 4 digits
    assert "exact_accuracy" not in md and "token_accuracy" not in md and "exact accuracy" not in md
    for png in ("learning_curves.png", "learning_curves_pass_8.png", "learning_curves_mean_reward.png",
                "bars_pass_1.png", "bars_pass_8.png", "bars_mean_reward.png"):
        assert (tmp_path / "rep" / png).is_file(), png
    assert not list((tmp_path / "rep").glob("*accuracy*"))


def test_cli_table_prints_the_declared_metrics(tmp_path, fake_recipe):
    from distlab.suite.cli import _build_and_print

    out = io.StringIO()
    _build_and_print(grpo_suite(tmp_path / "grpo", fake_recipe), "welch", out)
    text = out.getvalue()
    assert "pass@1 (%)" in text and "mean_reward" in text and "acc" not in text.replace("report", "")
    assert any(line.split()[:2] == ["big", "2"] and "55.00" in line for line in text.splitlines())


def test_toy_runs_report_toy_metrics(tmp_path):
    root = tmp_path / "toy"
    for seed, (acc, loss) in enumerate(((0.4, 1.5), (0.6, 1.1))):
        make_run(root, "only", seed, "toy", {"token_accuracy": acc, "loss": loss, "examples": 64.0})
    build_report(root, tmp_path / "rep")
    data = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert data["report_metrics"]["names"] == ["token_accuracy", "loss"]
    assert data["report_metrics"]["percent"] == ["token_accuracy"]
    assert data["experiments"]["only"]["metrics"]["loss"]["mean"] == pytest.approx(1.3)
    md = (tmp_path / "rep" / "report.md").read_text()
    assert _table_header(md) == ["experiment", "seeds", "token_accuracy (%)", "loss"]


def test_without_a_declaring_recipe_every_numeric_eval_metric_is_shown_sorted(tmp_path):
    suite = grpo_suite(tmp_path / "grpo", "not-installed-recipe")
    build_report(suite, tmp_path / "rep")
    shown = json.loads((tmp_path / "rep" / "report.json").read_text())["report_metrics"]
    # bookkeeping (step, time_s, flops, gpu_seconds) is not a metric; nothing is assumed to be a fraction
    assert shown["names"] == ["exact_accuracy", "mean_reward", "pass@1", "pass@8", "token_accuracy"]
    assert shown["percent"] == [] and "not-installed-recipe" in shown["source"]
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "Training efficiency" not in md  # milestones need a fraction-valued primary metric


def test_runs_without_a_manifest_use_the_suite_snapshots_recipe(tmp_path):
    root = tmp_path / "s"
    for seed in (0, 1):
        make_run(root, "a", seed, None, {"token_accuracy": 0.5 + seed / 10, "loss": 1.0, "examples": 8.0})
    (root / "suite.yaml").write_text("name: s\nrecipe: toy\nexperiments: {a: {}}\n")
    build_report(root, tmp_path / "rep")
    shown = json.loads((tmp_path / "rep" / "report.json").read_text())["report_metrics"]
    assert shown["names"] == ["token_accuracy", "loss"]


def test_no_installed_recipes_is_one_line_naming_pip_install(monkeypatch):
    import distlab.recipe as recipe_mod

    monkeypatch.setattr(recipe_mod.md, "entry_points", lambda **kw: [])
    for call in (recipe_mod.recipe_names, lambda: recipe_mod.load_recipe("hrm")):
        with pytest.raises(DistlabError) as err:
            call()
        assert "pip install -e ." in str(err.value) and "\n" not in str(err.value)


def test_the_core_lists_no_recipe_names():
    import distlab.recipe as recipe_mod

    assert not hasattr(recipe_mod, "BUILTIN")
    assert {"hrm", "ppo", "toy"} <= set(recipe_mod.recipe_names())  # found through pyproject's entry points


def test_progress_reads_the_recipes_steps_key(tmp_path, fake_recipe):
    from distlab.suite.runner import _configured_steps, steps_key_of

    assert steps_key_of("hrm") == "steps" and steps_key_of("ppo") == "total_timesteps"
    assert steps_key_of(fake_recipe) == "train.total_steps" and steps_key_of("nope") == "steps"
    cfg = tmp_path / "config.yaml"
    cfg.write_text("steps: 7\ntrain: {total_steps: 40}\ntotal_timesteps: 4096\nflag: true\n")
    assert _configured_steps(cfg, "train.total_steps") == 40 and _configured_steps(cfg) == 7
    assert _configured_steps(cfg, "total_timesteps") == 4096
    assert _configured_steps(cfg, "flag") is None and _configured_steps(cfg, "missing.key") is None
    assert math.isfinite(float(_configured_steps(cfg, "steps")))
