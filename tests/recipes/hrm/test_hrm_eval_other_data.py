"""A trained run scored on other datasets' test splits (issue 51's holdouts), with real processes on the CPU:
``distlab eval RUN data.path=DIR`` and ``eval.also=[...]`` keep the run's test-time sampling, name what they scored,
agree with each other and with training's final evaluation, and refuse a dataset the model cannot read in one line
before any process starts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from distlab.recipes.hrm.data import sudoku as sd
from distlab.recipes.hrm.data.holdout import build_holdout, load_spec
from distlab.recipes.hrm.data.maze import build_maze

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from clitools import run_cli  # noqa: E402

SPEC = Path(__file__).resolve().parent / "data" / "holdout_tiny.yaml"
TINY = ["data.build=sudoku", "data.train_size=64", "data.test_size=24", "data.workers=1", "data.blanks=10",
        "global_batch_size=8", "steps=6", "log.every=1", "arch.name=trm", "arch.hidden_size=32", "arch.num_heads=2",
        "arch.L_layers=1", "arch.H_cycles=2", "arch.L_cycles=2", "arch.halt_max_steps=3", "arch.puzzle_emb_ndim=32",
        "arch.forward_dtype=float32", "arch.act=halt_only", "arch.mlp_t=true", "arch.pos_encodings=none",
        "arch.puzzle_emb_len=2", "ema=true", "optimizer=adamw", "lr=1e-3", "lr_warmup_steps=2", "eval.samples=3"]
KEYS = ("count", "exact_accuracy", "sampled_exact_accuracy", "sampled_oracle_exact_accuracy", "blank_accuracy",
        "sampled_blank_accuracy", "samples", "sample_select")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 2-rank TRM run with 3 sampled trajectories, whose final evaluation also scored the holdout."""
    work = tmp_path_factory.mktemp("other_data")
    build_holdout(load_spec(SPEC), work / "holdout", verbose=False)
    sd.build_sudoku(work / "other", train_size=2, test_size=10, blanks=20, seed=11, workers=1, verbose=False)
    run_cli(["train", "hrm", *TINY, "run.name=r", f"eval.also=[{work / 'holdout'}]", "--procs", "2"], work)
    return work


def _eval(work: Path, out: str, *overrides: str, check: bool = True):
    return run_cli(["eval", str(work / "runs" / "r"), *overrides, "-o", str(work / out), "--procs", "2"], work,
                   check=check)


def test_eval_on_a_holdout_keeps_the_runs_sampling_and_names_what_it_scored(trained):
    work = trained
    _eval(work, "e1", f"data.path={work / 'holdout'}", f"eval.also=[{work / 'other'}]")
    doc = json.loads((work / "e1" / "eval.json").read_text())
    assert (doc["dataset"], doc["holdout"]) == (str(work / "holdout"), "tiny-holdout")
    assert doc["trained_on"] == "data/sudoku-n64-t24-aug0-s0-b10" and doc["weights"] == "ema"
    assert (doc["count"], doc["samples"], doc["sample_select"]) == (6, 3, "q")  # the run's own eval.* settings
    other = doc["also"][str(work / "other")]
    assert other["dataset"] == str(work / "other") and "holdout" not in other
    assert (other["count"], other["samples"]) == (10, 3)
    assert (work / "e1" / "also" / "other" / "predictions.npz").exists()
    # scored alone, in a process of its own, the other dataset gets the same numbers (noise seeds included)
    _eval(work, "e2", f"data.path={work / 'other'}", "eval.also=[]")
    alone = json.loads((work / "e2" / "eval.json").read_text())
    assert {k: alone[k] for k in KEYS} == {k: other[k] for k in KEYS}


def test_training_scored_eval_also_as_distlab_eval_does(trained):
    work = trained
    summary = json.loads((work / "runs" / "r" / "summary.json").read_text())
    in_run = summary["also"][str(work / "holdout")]
    assert in_run["holdout"] == "tiny-holdout"
    rows = [json.loads(x) for x in (work / "runs" / "r" / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in rows if r["split"] == "eval:tiny-holdout"]
    assert len(logged) == 1 and logged[0]["step"] == 6 and logged[0]["count"] == 6
    _eval(work, "e3", f"data.path={work / 'holdout'}", "eval.also=[]")
    doc = json.loads((work / "e3" / "eval.json").read_text())
    assert {k: doc[k] for k in KEYS} == {k: in_run[k] for k in KEYS}


def test_a_dataset_the_model_cannot_read_is_refused_before_any_process(trained):
    work = trained
    build_maze(work / "maze", train_size=1, test_size=1, min_path_length=20, seed=1)
    for args in ([f"data.path={work / 'maze'}", "eval.also=[]"], [f"eval.also=[{work / 'maze'}]"]):
        proc = _eval(work, "e4", *args, check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode != 0 and len(lines) == 1, proc.stderr
        assert lines[0].startswith(f"distlab: error: cannot score {work / 'maze'}: it has vocab_size 6, seq_len 900 "
                                   f"where the training data (data/sudoku-n64-t24-aug0-s0-b10) has vocab_size 11, "
                                   f"seq_len 81")
        assert not (work / "e4").exists()


def test_training_on_a_holdout_is_refused(trained):
    work = trained
    proc = run_cli(["train", "hrm", *TINY, f"data.path={work / 'holdout'}", "run.name=h", "--procs", "1"], work,
                   check=False)
    assert proc.returncode != 0
    assert "has no training examples (a holdout is built for evaluation only)" in proc.stderr.strip().splitlines()[-1]


def test_eval_also_must_name_built_distinct_folders(trained):
    work = trained
    proc = _eval(work, "e5", f"eval.also=[{work / 'nothing'}]", check=False)
    assert proc.returncode != 0 and "holds no test/dataset.json; build it first" in proc.stderr
    (work / "x").mkdir()
    sd.build_sudoku(work / "x" / "other", train_size=2, test_size=3, blanks=20, seed=12, workers=1, verbose=False)
    proc = _eval(work, "e5", f"eval.also=[{work / 'other'},{work / 'x' / 'other'}]", check=False)
    assert proc.returncode != 0 and "two datasets in folders called other" in proc.stderr
