"""The HRM recipe end to end on CPU with real processes: every arch trains on 2 ranks and resumes exactly."""

import json
import sys
from pathlib import Path

import pytest

from clitools import run_cli, run_clis  # noqa: E402

TINY = ["data.build=sudoku", "data.train_size=64", "data.test_size=24", "data.workers=1", "data.blanks=10",
        "global_batch_size=8", "steps=6", "log.every=1", "arch.hidden_size=32", "arch.num_heads=2",
        "arch.H_layers=1", "arch.L_layers=1", "arch.num_layers=2", "arch.H_cycles=2", "arch.L_cycles=2",
        "arch.halt_max_steps=3", "arch.puzzle_emb_ndim=32", "arch.forward_dtype=float32", "optimizer=adamw",
        "lr=1e-3", "lr_warmup_steps=2", "puzzle_emb_lr=1e-2"]
ARCHS = {"hrm": [], "trm": ["arch.act=halt_only", "ema=true", "arch.mlp_t=true", "arch.pos_encodings=none",
                            "arch.puzzle_emb_len=2"], "transformer": ["arch.act=fixed"]}


def _summary(d):
    return json.loads((d / "summary.json").read_text())


def _train_rows(d):
    rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["split"] == "train"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("hrm")


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_two_rank_run_resumes_exactly(workdir, arch):
    args = ["train", "hrm", *TINY, f"arch.name={arch}", *ARCHS[arch], "--procs", "2"]
    run_clis([[*args, f"run.name={arch}-full"], [*args, f"run.name={arch}-cut", "run.stop_at=3"]], workdir)
    cut = workdir / "runs" / f"{arch}-cut"
    assert _summary(cut)["status"] == "preempted"
    run_cli([*args, f"run.name={arch}-cut"], workdir)  # same command: resumes from step 3
    full = workdir / "runs" / f"{arch}-full"
    a, b = _summary(full), _summary(cut)
    assert b["status"] == "completed" and b["step"] == 6
    assert b["param_checksum"] == a["param_checksum"]  # bitwise: weights, optimizer, data order, ACT carry
    assert [r["loss"] for r in _train_rows(cut)] == [r["loss"] for r in _train_rows(full)]
    assert b["eval"]["exact_accuracy"] == a["eval"]["exact_accuracy"]
    assert a["eval"]["count"] == 24  # every test example counted exactly once across the 2 ranks


def test_eval_command_matches_training_eval_and_writes_reports(workdir):
    run_dir = workdir / "runs" / "hrm-full"
    if not (run_dir / "summary.json").exists():
        run_cli(["train", "hrm", *TINY, "arch.name=hrm", "run.name=hrm-full", "--procs", "2"], workdir)
    before = {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir() if p.is_file()}
    run_cli(["eval", str(run_dir), "--procs", "2"], workdir)
    assert {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir() if p.is_file()} == before  # run untouched
    ev = json.loads((run_dir / "eval" / "step00000006" / "eval.json").read_text())
    trained = _summary(run_dir)["eval"]
    assert ev["count"] == 24 and ev["step"] == 6
    assert ev["exact_accuracy"] == trained["exact_accuracy"]
    assert abs(ev["token_accuracy"] - trained["token_accuracy"]) < 1e-9
    assert sum(r["count"] for r in ev["by_difficulty"]) == 24
    out = run_dir / "eval" / "step00000006"
    import numpy as np

    pred = np.load(out / "predictions.npz")
    assert sorted(pred["index"].tolist()) == list(range(24)) and pred["preds"].shape == (24, 81)
    assert (out / "by_difficulty.md").read_text().startswith("|") and (out / "by_difficulty.png").exists()
    assert (run_dir / "predictions.npz").exists()  # saved by the final evaluation of training too


def test_trm_ema_trained_on_two_ranks_is_what_one_rank_eval_scores(workdir):
    """The EMA is replicated state: a 1-rank eval of a 2-rank run must score the averaged weights."""
    name = "trm-ema"
    run_cli(["train", "hrm", *TINY, "arch.name=trm", *ARCHS["trm"], "ema_warmup=false", "arch.ema_decay=0.5",
             f"run.name={name}", "--procs", "2"], workdir)
    run_dir = workdir / "runs" / name
    trained = _summary(run_dir)["eval"]  # computed in training with the EMA weights applied
    run_cli(["eval", str(run_dir), "--procs", "1"], workdir)
    ev = json.loads((run_dir / "eval" / "step00000006" / "eval.json").read_text())
    assert ev["weights"] == "ema" and ev["count"] == trained["count"] == 24
    assert ev["exact_accuracy"] == trained["exact_accuracy"]
    # float32 per-batch sums grouped differently on 1 and 2 ranks: equal to float32 precision
    assert abs(ev["token_accuracy"] - trained["token_accuracy"]) < 1e-6
    assert abs(ev["q_halt_accuracy"] - trained["q_halt_accuracy"]) < 1e-9


def test_interim_evaluations_use_their_limit_and_the_final_one_the_whole_test_set(workdir):
    """Learning curves from a few test examples; the reported result from all of them."""
    run_cli(["train", "hrm", *TINY, "arch.name=hrm", "eval_every=2", "data.interim_eval_limit=8",
             "run.name=interim"], workdir)
    rows = [json.loads(x) for x in (workdir / "runs" / "interim" / "metrics.jsonl").read_text().splitlines()]
    evals = [(r["step"], r["count"]) for r in rows if r["split"] == "eval"]
    assert evals == [(2, 8), (4, 8), (6, 24)]
    final = _summary(workdir / "runs" / "interim")["eval"]
    assert final["count"] == 24
    rows = final["by_difficulty"]  # blank-cell accuracy per bucket adds up to the overall one
    assert sum(r["blank_cells"] for r in rows) == final["blank_cells"]
    right = sum(r["blank_accuracy"] * r["blank_cells"] for r in rows)
    assert right / final["blank_cells"] == pytest.approx(final["blank_accuracy"])


def test_train_log_lines_score_every_sequence_that_halted_since_the_last_line(workdir):
    """With fixed 4 segments a batch halts together every 4th step: a line covering none says so (null
    accuracies, halted 0), never a made-up 0% accuracy."""
    base = ["train", "hrm", *TINY, "arch.name=hrm", "arch.act=fixed", "arch.halt_max_steps=4", "steps=8"]
    run_cli([*base, "log.every=4", "run.name=win4"], workdir)
    rows = _train_rows(workdir / "runs" / "win4")
    assert [(r["step"], r["halted"], r["steps"]) for r in rows] == [(4, 2.0, 4.0), (8, 2.0, 4.0)]  # 8 halt / 4 steps
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in rows)
    run_cli([*base, "log.every=3", "run.name=win3"], workdir)
    first = _train_rows(workdir / "runs" / "win3")[0]
    assert first["step"] == 3 and first["halted"] == 0.0 and first["accuracy"] is None and first["loss"] > 0
