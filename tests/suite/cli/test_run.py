"""A real suite on CPU: runs, logs, report numbers equal to the runs' own summaries, resume, failures."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

EXPERIMENTS = {"base": {}, "fast_lr": {"lr": 3.0e-3}}
ROOT = Path(__file__).resolve().parents[3]


def _ci_text(values: list[float]) -> str:
    """mean ± 95% Student-t half-width in percent, as the report prints it."""
    x = 100 * np.asarray(values)
    half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return f"{x.mean():.2f} ± {half:.2f}"


def _md_row(report: str, experiment: str) -> list[str]:
    pattern = rf"^\|\s*{re.escape(experiment)}( \(baseline\))?\s*\|"
    line = next(ln for ln in report.splitlines() if re.match(pattern, ln))
    return [c.strip() for c in line.strip("|").split("|")]


def test_suite_runs_reports_its_own_numbers_and_resumes(tmp_path, tiny_suite, cli):
    suite_file = tiny_suite(tmp_path / "tiny.yaml", EXPERIMENTS)
    res = cli(["suite", "run", str(suite_file), "--seeds", "2", "--procs", "1", "--parallel", "2", "--root", "res"],
              cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "4 ran, 0 already finished, 0 failed" in res.stdout
    runs = {(e, s): tmp_path / "res" / "tiny" / e / f"seed{s}" for e in EXPERIMENTS for s in (0, 1)}
    summaries = {k: json.loads((d / "summary.json").read_text()) for k, d in runs.items()}
    assert all(s["status"] == "completed" and s["step"] == 4 for s in summaries.values())
    # every run really is its own seed and experiment
    for (exp, seed), run_dir in runs.items():
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert cfg["run"]["seed"] == seed and cfg["lr"] == (3.0e-3 if exp == "fast_lr" else 1.0e-3)
        assert cfg["scale"] == {"batch": "linear", "lr": "sqrt", "base_world_size": 1}
        log = (tmp_path / "logs" / "tiny" / f"{exp}-seed{seed}.log").read_text()
        assert f"run.seed={seed}" in log and "eval @4" in log
    snapshot = yaml.safe_load((tmp_path / "res" / "tiny" / "suite.yaml").read_text())
    assert snapshot["baseline"] == "base"
    assert sorted(snapshot["planned"]) == sorted(f"{e}/seed{s}" for e in EXPERIMENTS for s in (0, 1))
    assert len({summaries[k]["train"]["loss"] for k in summaries}) == 4  # seeds and lr change the run

    report = (tmp_path / "res" / "tiny" / "report" / "report.md").read_text()
    header = _md_row(report, "experiment")
    for exp in EXPERIMENTS:
        row = dict(zip(header, _md_row(report, exp)))
        for metric in ("exact_accuracy", "token_accuracy"):
            values = [summaries[(exp, s)]["eval"][metric] for s in (0, 1)]
            assert row[f"{metric} (%)"] == _ci_text(values), (exp, metric, row)
        token = _ci_text([summaries[(exp, s)]["eval"]["token_accuracy"] for s in (0, 1)])
        assert re.search(rf"^\s+{exp}\b.*{re.escape(token)}", res.stdout, flags=re.M), res.stdout

    mtimes = {k: (d / "summary.json").stat().st_mtime_ns for k, d in runs.items()}
    metrics_sizes = {k: (d / "metrics.jsonl").stat().st_size for k, d in runs.items()}
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "res").rglob("seed*"))
    again = cli(["suite", "run", str(suite_file), "--seeds", "2", "--procs", "1", "--root", "res"], cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "0 ran, 4 already finished, 0 failed" in again.stdout
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "res").rglob("seed*")) == before
    assert {k: (d / "summary.json").stat().st_mtime_ns for k, d in runs.items()} == mtimes
    # nothing was trained again: no run wrote a new line to its metrics (a stopwatch would flake on busy CI)
    assert {k: (d / "metrics.jsonl").stat().st_size for k, d in runs.items()} == metrics_sizes
    plan = cli(["suite", "run", str(suite_file), "--seeds", "3", "--procs", "1", "--root", "res", "--dry-run"],
               cwd=tmp_path).stdout
    assert plan.count("skip (finished)") == 4 and "6 runs (4 already finished)" in plan


def test_a_failed_run_is_reported_and_the_suite_goes_on(tmp_path, tiny_suite, cli):
    # 30 is not divisible by 4 heads: the first run fails in validation, the second must still run
    suite_file = tiny_suite(tmp_path / "mixed.yaml", {"ok": {}, "broken": {"arch.hidden_size": 30,
                                                                           "arch.num_heads": 4}})
    text = yaml.safe_load(suite_file.read_text())
    text["experiments"] = {"broken": text["experiments"]["broken"], "ok": {}}
    text["baseline"] = "ok"
    suite_file.write_text(yaml.safe_dump(text, sort_keys=False))
    res = cli(["suite", "run", str(suite_file), "--seeds", "1", "--root", "res"], cwd=tmp_path)
    assert res.returncode == 1
    assert "1 ran, 0 already finished, 1 failed" in res.stdout
    assert re.search(r"FAILED broken-seed0 \(exit 2\); log: logs/mixed/broken-seed0\.log", res.stdout)
    assert "not divisible by arch.num_heads" in res.stderr  # the log's tail is shown where it failed
    assert (tmp_path / "res" / "mixed" / "ok" / "seed0" / "summary.json").is_file()
    assert (tmp_path / "res" / "mixed" / "report" / "report.md").is_file()
    rep = cli(["suite", "report", "res/mixed", "--test", "exact"], cwd=tmp_path)
    assert rep.returncode == 0 and "res/mixed/report/report.md" in rep.stdout and "ok *" in rep.stdout


def test_ctrl_c_checkpoints_the_running_run_and_a_rerun_resumes_it(tmp_path, tiny_suite):
    suite_file = tiny_suite(tmp_path / "slow.yaml", {"slow": {}}, base={"steps": 60, "ckpt.every": 1})
    cmd = [sys.executable, "-m", "distlab.cli", "suite", "run", str(suite_file), "--seeds", "1", "--root", "res",
           "--no-report"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    run = tmp_path / "res" / "slow" / "slow" / "seed0"
    deadline = time.monotonic() + 120
    while len(list((run / "checkpoints").glob("step*"))) < 2:
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()[0]
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends the scheduler (the run has its own session)
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, out
    stopped = json.loads((run / "summary.json").read_text())
    assert stopped["status"] == "preempted" and 2 <= stopped["step"] < 60, stopped
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "1 ran, 0 already finished, 0 failed" in again.stdout, again.stderr
    final = json.loads((run / "summary.json").read_text())
    assert final["status"] == "completed" and final["step"] == 60
    log = (tmp_path / "logs" / "slow" / "slow-seed0.log").read_text()
    assert log.count("===== ") == 2 and f"step{stopped['step']:08d}" in log and "resumed from" in log


@pytest.mark.parametrize(("name", "experiments"), [
    ("hierarchy_x4", ["hrm", "transformer_flat", "transformer_deep", "trm"]),
    ("act_x4", ["q_learning", "halt_only", "fixed", "none"]),
])
def test_issue51_suite_runs_tiny_and_reports_exact_accuracy_with_holm_and_plots(tmp_path, tiny_data, cli, name,
                                                                                 experiments):
    """Each issue-51 suite file at its smoke size, shrunk further (6 steps, the shared tiny data), 2 seeds, through
    `suite run` and `suite report`: exact and blank-cell accuracy per experiment as mean ± 95% interval equal to the
    runs' own summaries, tests of both against the baseline with Holm's correction, and their plots."""
    suite_file = ROOT / "benchmarks" / "suites" / f"{name}.yaml"
    res = cli(["suite", "run", str(suite_file), "--smoke", "--seeds", "2", "--procs", "1", "--parallel", "2",
               "--root", "res", "--no-report", f"data.path={tiny_data}", "steps=6", "eval_every=3",
               "global_batch_size=8", "lr_warmup_steps=1", "log.every=1"], cwd=tmp_path, timeout=600)
    assert res.returncode == 0 and "8 ran, 0 already finished, 0 failed" in res.stdout, res.stdout + res.stderr
    rep = cli(["suite", "report", f"res/{name}"], cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    out = tmp_path / "res" / name / "report"
    data = json.loads((out / "report.json").read_text())
    assert data["baseline"] == experiments[0] and list(data["experiments"]) == experiments
    assert data["report_metrics"]["primary"] == "exact_accuracy" and "blank_accuracy" in data["report_metrics"]["names"]
    for exp in experiments:
        summaries = [json.loads((tmp_path / "res" / name / exp / f"seed{s}" / "summary.json").read_text())
                     for s in (0, 1)]
        assert all(s["status"] == "completed" and s["step"] == 6 for s in summaries)
        for metric in ("exact_accuracy", "blank_accuracy"):
            got = data["experiments"][exp]["metrics"][metric]
            values = [s["eval"][metric] for s in summaries]
            assert got["n"] == 2 and got["mean"] == pytest.approx(np.mean(values))
            half = stats.t.ppf(0.975, 1) * np.std(values, ddof=1) / math.sqrt(2)
            assert got["half_width"] == pytest.approx(half, abs=1e-12)
            tests = data["experiments"][exp]["tests"]
            if exp == experiments[0]:
                assert tests == {}
            else:  # Welch against the baseline, Holm over the suite's three comparisons
                assert tests[metric]["method"] == "welch" and "p_holm" in tests[metric]
                p, holm = tests[metric]["p_value"], tests[metric]["p_holm"]
                assert (p is None and holm is None) or holm >= p
    for figure in ("bars_exact_accuracy.png", "bars_blank_accuracy.png", "learning_curves.png",
                   "learning_curves_blank_accuracy.png"):
        assert (out / figure).stat().st_size > 1000, figure
    report = (out / "report.md").read_text()
    assert "exact_accuracy (%)" in report and "blank_accuracy (%)" in report
    assert f"Tests against {experiments[0]}" in report
