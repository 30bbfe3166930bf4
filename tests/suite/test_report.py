"""Reports built from synthetic run folders whose numbers are known in advance."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from distlab.errors import DistlabError
from distlab.suite.report import build_report
from distlab.suite.spec import load_suite

T_975_DF2 = 4.303
FINAL = {"base": [0.5, 0.6, 0.7], "better": [0.8, 0.85, 0.9], "lonely": [0.3]}
TOKEN = {"base": [0.9, 0.92, 0.94], "better": [0.95, 0.96, 0.97], "lonely": [0.8]}
STEPS = (100, 200, 300)


def make_run(root: Path, exp: str, seed: int, final: float, token: float, token_key: str = "token_accuracy",
             finished: bool = True, seconds_key: str = "gpu_seconds") -> Path:
    """Eval accuracy ramps linearly to ``final``; FLOPs 1e12 and 0.5 GPU-seconds per step."""
    run = root / exp / f"seed{seed}"
    run.mkdir(parents=True)
    lines = [json.dumps({"step": s, "split": "train", "time_s": s * 0.1, "loss": 1.0 / s}) for s in STEPS]
    for s in STEPS:
        lines.append(json.dumps({"step": s, "split": "eval", "time_s": s * 0.1, "exact_accuracy": final * s / 300,
                                 token_key: token, "pass@1": final, "flops": s * 1e12, seconds_key: s * 0.5}))
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (run / "config.yaml").write_text(f"seed: {seed}\n")
    (run / "manifest.json").write_text(json.dumps({"recipe": "hrm"}))  # hrm declares exact/token acc, pass@k
    if finished:
        summary = {"exact_accuracy": final, token_key: token, "pass@1": final, "flops": 300e12, seconds_key: 150.0,
                   "by_difficulty": [{"bucket": "easy", "count": 40, "exact_accuracy": min(1.0, final + 0.1)},
                                     {"bucket": "hard", "count": 10, "exact_accuracy": final - 0.2}]}
        (run / "summary.json").write_text(json.dumps(summary))
    return run


@pytest.fixture
def suite_dir(tmp_path: Path) -> Path:
    root = tmp_path / "experiment_results" / "toy"
    for exp, finals in FINAL.items():
        for seed, (f, t) in enumerate(zip(finals, TOKEN[exp])):
            make_run(root, exp, seed, f, t, token_key="accuracy" if exp == "better" else "token_accuracy")
    make_run(root, "better", 9, 0.0, 0.0, finished=False)
    preempted = make_run(root, "lonely", 5, 0.9, 0.9)  # stopped on SIGUSR1: summary exists but is not final
    (preempted / "summary.json").write_text(json.dumps({"status": "preempted", "exact_accuracy": 0.9}))
    with open(root / "base" / "seed0" / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 400, "split": "ev')  # a run killed mid-write: the torn last line is ignored
    (root / "suite.yaml").write_text("name: toy\nbaseline: base\nexperiments: {base: {}, better: {}, lonely: {}}\n")
    return root


def test_report_numbers_match_hand_computation(suite_dir, tmp_path):
    md = build_report(suite_dir, tmp_path / "rep")
    data = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert data["baseline"] == "base"
    assert data["report_metrics"]["names"] == ["exact_accuracy", "token_accuracy", "pass@1"]  # hrm's, as logged
    assert data["report_metrics"]["primary"] == "exact_accuracy" and "hrm" in data["report_metrics"]["source"]
    exps = data["experiments"]
    assert list(exps) == ["base", "better", "lonely"]
    base = exps["base"]["metrics"]["exact_accuracy"]
    assert base["mean"] == pytest.approx(0.6)
    assert base["half_width"] == pytest.approx(T_975_DF2 * 0.1 / math.sqrt(3), rel=1e-3)
    assert exps["better"]["metrics"]["token_accuracy"]["mean"] == pytest.approx(0.96)  # 'accuracy' alias
    assert exps["better"]["metrics"]["pass@1"]["mean"] == pytest.approx(0.85)
    lonely = exps["lonely"]["metrics"]["exact_accuracy"]
    assert lonely["n"] == 1 and lonely["half_width"] is None  # nan written as null
    a, b = FINAL["better"], FINAL["base"]
    va, vb = np.var(a, ddof=1) / 3, np.var(b, ddof=1) / 3
    t = (np.mean(a) - np.mean(b)) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 2)
    p = 2 * sps.t.sf(t, df)
    test = exps["better"]["tests"]["exact_accuracy"]
    assert test["method"] == "welch" and test["p_value"] == pytest.approx(p)
    assert test["significant"] == (p < 0.05)
    assert test["p_holm"] == pytest.approx(p)  # lonely's single seed gives no test: a family of one
    assert exps["lonely"]["tests"]["exact_accuracy"]["p_value"] is None  # one seed: no test
    assert exps["better"]["seeds"] == [0, 1, 2]
    assert data["unfinished"] == [str(suite_dir / "better" / "seed9"), str(suite_dir / "lonely" / "seed5")]

    text = md.read_text()
    assert f"| better | 3 | 85.00 ± {100 * T_975_DF2 * 0.05 / math.sqrt(3):.2f}" in text
    assert "| lonely | 1 | 30.00 ± n/a" in text
    assert f"| +25.00 | {p:.3g} (Holm {p:.3g}) | {'yes' if p < 0.05 else 'no'} |" in text
    assert "Holm-corrected over the 2 comparisons" in text
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "<table>" in html and 'src="learning_curves.png"' in html and "85.00" in html
    assert 'src="learning_curves_token_accuracy.png"' in html
    for png in ("learning_curves.png", "learning_curves_token_accuracy.png", "learning_curves_pass_1.png",
                "bars_exact_accuracy.png", "bars_token_accuracy.png", "bars_pass_1.png", "difficulty.png"):
        assert (tmp_path / "rep" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list((tmp_path / "rep").glob(".*tmp*"))  # atomic writes leave no temp files


def test_efficiency_cost_and_difficulty(suite_dir, tmp_path):
    build_report(suite_dir, tmp_path / "rep", thresholds=(0.25, 0.5, 0.95))
    exps = json.loads((tmp_path / "rep" / "report.json").read_text())["experiments"]
    # base seeds reach 0.25 at steps 200, 200, 200 (0.5*2/3=0.33 ...) and 0.5 at 300, 300, 200 (0.7*2/3=0.47 -> 300)
    expected = {}
    for thr in (0.25, 0.5):
        steps = [next(s for s in STEPS if f * s / 300 >= thr) for f in FINAL["base"]]
        expected[thr] = np.mean(steps)
    eff = exps["base"]["efficiency"]
    assert eff["0.25"]["step"]["mean"] == pytest.approx(expected[0.25])
    assert eff["0.5"]["step"]["mean"] == pytest.approx(expected[0.5])
    assert eff["0.5"]["gpu_seconds"]["mean"] == pytest.approx(expected[0.5] * 0.5)
    assert eff["0.95"]["reached"] == 0 and eff["0.5"]["reached"] == 3
    cost = exps["better"]["cost"]["flops_per_point"]
    assert cost["mean"] == pytest.approx(np.mean([300e12 / (100 * f) for f in FINAL["better"]]))
    hard = exps["base"]["difficulty"]["hard"]
    assert hard["count"] == 10 and hard["exact_accuracy"]["mean"] == pytest.approx(0.4)
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "## Exact accuracy by difficulty" in text and "| hard | 10 | 40.00 ±" in text


def test_paired_test_option_and_explicit_baseline(suite_dir, tmp_path):
    build_report(suite_dir, tmp_path / "rep", baseline="better", test="paired")
    exps = json.loads((tmp_path / "rep" / "report.json").read_text())["experiments"]
    diffs = np.array(FINAL["base"]) - np.array(FINAL["better"])
    t = diffs.mean() / (diffs.std(ddof=1) / math.sqrt(3))
    assert exps["base"]["tests"]["exact_accuracy"]["method"] == "paired"
    assert exps["base"]["tests"]["exact_accuracy"]["p_value"] == pytest.approx(2 * sps.t.sf(abs(t), 2))


def test_suite_snapshot_gives_baseline_and_order(tmp_path):
    spec = tmp_path / "abl.yaml"
    spec.write_text("recipe: hrm\nbaseline: ref\nexperiments: {zeta: {lr: 1}, ref: {}}\n")
    suite = load_suite(spec)
    root = tmp_path / "experiment_results" / "abl"
    for exp, finals in (("zeta", [0.2, 0.3]), ("ref", [0.6, 0.7])):
        for seed, f in enumerate(finals):
            make_run(root, exp, seed, f, 0.9)
    suite.write_snapshot(root)
    md = build_report(root).read_text()
    assert md.index("| ref (baseline) |") < md.index("| zeta |")
    assert "## Tests against ref" in md


def test_planned_runs_that_never_started_are_listed(tmp_path):
    spec = tmp_path / "abl.yaml"
    spec.write_text("recipe: hrm\nbaseline: ref\nexperiments: {zeta: {lr: 1}, ref: {}}\n")
    root = tmp_path / "experiment_results" / "abl"
    for exp in ("zeta", "ref"):
        for seed in range(2):
            make_run(root, exp, seed, 0.3 + 0.1 * seed, 0.9)
    planned = [f"{e}/seed{k}" for e in ("zeta", "ref") for k in range(3)]  # seed2 of each never got a folder
    load_suite(spec).write_snapshot(root, planned=planned)
    md = build_report(root).read_text()
    data = json.loads((root / "report" / "report.json").read_text())
    assert data["never_started"] == ["zeta/seed2", "ref/seed2"]
    assert "## Planned runs that never started" in md and "2 run(s)" in md and "zeta/seed2, ref/seed2" in md
    load_suite(spec).write_snapshot(root, planned=planned[:2] + planned[3:5])  # every planned run has a folder
    assert "never started" not in build_report(root).read_text()


def test_clear_errors(tmp_path):
    with pytest.raises(DistlabError, match="does not exist"):
        build_report(tmp_path / "missing")
    make_run(tmp_path / "s", "a", 0, 0.5, 0.9, finished=False)
    with pytest.raises(DistlabError, match="no finished runs"):
        build_report(tmp_path / "s")
    make_run(tmp_path / "s", "b", 0, 0.5, 0.9)
    with pytest.raises(DistlabError, match="baseline 'zzz' has no finished runs"):
        build_report(tmp_path / "s", baseline="zzz")
    (tmp_path / "s" / "b" / "seed0" / "summary.json").write_text("{oops")
    with pytest.raises(DistlabError, match="not valid JSON"):
        build_report(tmp_path / "s")


def test_without_baseline_the_report_still_builds(tmp_path):
    make_run(tmp_path / "s", "a", 0, 0.5, 0.9)
    make_run(tmp_path / "s", "a", 1, 0.7, 0.9)
    md = build_report(tmp_path / "s")
    assert md == tmp_path / "s" / "report" / "report.md"
    assert "significance tests skipped" in md.read_text()


def test_nested_eval_summary_as_the_trainer_writes_it(tmp_path):
    """distlab's trainer nests final eval metrics under "eval" and marks completion in "status"."""
    for seed, acc in enumerate((0.4, 0.6)):
        run = make_run(tmp_path / "s", "a", seed, 0.0, 0.0)
        (run / "summary.json").write_text(json.dumps({"status": "completed", "step": 300, "eval": {
            "exact_accuracy": acc, "accuracy": acc + 0.3,
            "by_difficulty": [{"bucket": "hard", "count": 5, "exact_accuracy": acc / 2}]}}))
    build_report(tmp_path / "s", tmp_path / "rep")
    a = json.loads((tmp_path / "rep" / "report.json").read_text())["experiments"]["a"]
    assert a["metrics"]["exact_accuracy"]["mean"] == pytest.approx(0.5)
    assert a["metrics"]["token_accuracy"]["mean"] == pytest.approx(0.8)
    assert a["difficulty"]["hard"]["exact_accuracy"]["mean"] == pytest.approx(0.25)


def test_holm_correction_decides_significance_over_the_family():
    from distlab.suite.report import _correct_for_multiple_comparisons
    from distlab.suite.stats import holm_adjust

    assert holm_adjust([0.01, 0.04, 0.03, math.nan])[:3] == pytest.approx([0.03, 0.06, 0.06])
    assert math.isnan(holm_adjust([0.01, 0.04, 0.03, math.nan])[3])
    results = {n: {"tests": {"m": {"p_value": pv}}} for n, pv in (("a", 0.01), ("b", 0.04), ("c", 0.03))}
    _correct_for_multiple_comparisons(results, ["a", "b", "c"], ("m",))
    assert [results[n]["tests"]["m"]["significant"] for n in "abc"] == [True, False, False]  # raw p < 0.05 for all


def test_cost_table_reports_steps_and_steady_examples_per_s(tmp_path):
    from distlab.suite.runs import read_run

    run = tmp_path / "exp" / "seed0"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"step": 30, "eval": {"exact_accuracy": 0.5}}))
    rates = [10.0, 20.0, 100.0, 110.0, 120.0, 130.0]  # the first third is compilation
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": 5 * i, "split": "train", "examples_per_s": r}) + "\n"
                                               for i, r in enumerate(rates, 1)))
    data = read_run(run, "exp", 0)
    assert data.examples_per_s == pytest.approx(115.0)
    assert data.final("step") == 30


def test_the_starting_models_evaluation_is_the_curves_first_point(tmp_path):
    """LM recipes score the starting model as split eval_start at step 0: a curve from 0, not from the first
    trained evaluation (a run evaluated only before and after would otherwise plot one point)."""
    from distlab.suite.runs import read_run

    run = tmp_path / "exp" / "seed0"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"step": 80, "eval": {"pass@1": 0.6}}))
    rows = [{"step": 0, "split": "eval_start", "pass@1": 0.3}, {"step": 1, "split": "train", "reward_mean": 0.2},
            {"step": 80, "split": "eval", "pass@1": 0.6}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = read_run(run, "exp", 0)
    assert [(r["step"], r["pass@1"]) for r in data.evals] == [(0, 0.3), (80, 0.6)]


@pytest.mark.parametrize("seconds_key, unit", [("gpu_seconds", "GPU-seconds"), ("device_seconds", "device-seconds")])
def test_cost_is_in_gpu_seconds_only_when_the_runs_trained_on_gpus(tmp_path, seconds_key, unit):
    """CPU runs log device_seconds (processes x wall time) only: the report must not call that GPU time."""
    root = tmp_path / "experiment_results" / "toy"
    for exp in ("base", "better"):
        for seed in range(2):
            make_run(root, exp, seed, 0.5 + 0.1 * seed, 0.9, seconds_key=seconds_key)
    (root / "suite.yaml").write_text("name: toy\nbaseline: base\nexperiments: {base: {}, better: {}}\n")
    text = build_report(root, tmp_path / "rep", thresholds=(0.25,)).read_text()
    assert f"| {unit} |" in text and f"{unit.replace('seconds', 's')} to 0.25" in text
    other = "device-seconds" if unit == "GPU-seconds" else "GPU-seconds"
    assert other not in text and other.replace("seconds", "s ") not in text
    cost = json.loads((tmp_path / "rep" / "report.json").read_text())["experiments"]["base"]["cost"]
    assert cost["gpu_seconds"]["mean"] == pytest.approx(150.0)  # the same cost either way, only its name differs


def test_intervals_wider_than_the_means_are_called_out(tmp_path):
    root = tmp_path / "experiment_results" / "toy"
    for exp, finals in (("base", (0.05, 0.45)), ("better", (0.50, 0.52))):  # base: 2 seeds far apart
        for seed, f in enumerate(finals):
            make_run(root, exp, seed, f, 0.9)
    (root / "suite.yaml").write_text("name: toy\nbaseline: base\nexperiments: {base: {}, better: {}}\n")
    text = " ".join(build_report(root, tmp_path / "rep").read_text().split())
    assert "Warning: intervals wider than their means in base (too few seeds" in text
    assert "in base, better" not in text
