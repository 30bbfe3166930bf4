"""End-to-end runs through the real ``distlab`` command, with real processes (gloo on CPU)."""

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from clitools import losses, run_cli, summary

COMMON = ["steps=12", "log.every=1", "num_examples=256", "global_batch_size=16", "d_model=32", "eval_examples=64"]


def _run(tmp_path, name, *extra, procs=None, check=True):
    args = ["train", "toy", *COMMON, f"run.name={name}", *extra]
    if procs:
        args += ["--procs", str(procs)]
    return run_cli(args, tmp_path, check=check)


@pytest.fixture(scope="module")
def uncut(tmp_path_factory) -> dict[int, Path]:
    """The uninterrupted run on 1 and on 2 ranks, trained once: every test below compares its own runs to these
    (read only; a test that writes into a run copies it first)."""
    d = tmp_path_factory.mktemp("uncut")
    _run(d, "one")
    _run(d, "two", procs=2)
    return {1: d / "runs" / "one", 2: d / "runs" / "two"}


def test_resume_is_bitwise_equal_to_uninterrupted(tmp_path, uncut):
    _run(tmp_path, "cut", "run.stop_at=5")
    cut = tmp_path / "runs" / "cut"
    assert summary(cut)["status"] == "preempted" and summary(cut)["step"] == 5
    _run(tmp_path, "cut")  # the same command again resumes
    full = uncut[1]
    assert summary(cut)["status"] == "completed"
    assert summary(cut)["param_checksum"] == summary(full)["param_checksum"]
    assert losses(cut) == losses(full)  # step 1..5 logged before the cut, 6..12 after; all identical
    assert summary(cut)["eval"] == summary(full)["eval"]


def test_resume_on_another_world_size(tmp_path, uncut):
    _run(tmp_path, "cut", "run.stop_at=6", procs=2)
    _run(tmp_path, "cut")  # continue the 2-rank run on 1 rank
    full, cut = losses(uncut[2]), losses(tmp_path / "runs" / "cut")
    assert len(cut) == len(full) == 12
    assert cut == pytest.approx(full, rel=1e-4, abs=1e-5)
    manifest = json.loads((tmp_path / "runs" / "cut" / "manifest.json").read_text())
    assert manifest["world_size"] == 1 and manifest["previous_starts"][0]["world_size"] == 2
    # every row names the batch it trained on: the same 12 batches, in order, before and after the resume
    full_batches, cut_batches = _digests(uncut[2]), _digests(tmp_path / "runs" / "cut")
    assert cut_batches == full_batches and len(set(full_batches.values())) == 12


def _digests(run: Path) -> dict[int, str]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["data_digest"] for r in rows if r["split"] == "train"}


def test_two_ranks_match_one_rank(uncut):
    a, b = losses(uncut[1]), losses(uncut[2])
    assert b == pytest.approx(a, rel=1e-4, abs=1e-5)
    d = uncut[2]
    assert {"config.yaml", "manifest.json", "metrics.jsonl", "train.log", "rank0.log", "rank1.log", "summary.json",
            "checkpoints"} <= {p.name for p in d.iterdir()}


def test_kill_9_of_one_rank_recovers_from_checkpoint(tmp_path, uncut):
    import subprocess
    import sys

    # killed a second after the step-4 checkpoint, at 0.4 s a step: steps 5..12 are still to run
    args = [sys.executable, "-m", "distlab.cli", "train", "toy", *COMMON, "run.name=crash",
            "ckpt.every=4", "step_delay_s=0.4", "--procs", "2", "--max-restarts", "1"]
    proc = subprocess.Popen(args, cwd=tmp_path, env=dict(os.environ, OMP_NUM_THREADS="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ck = tmp_path / "runs" / "crash" / "checkpoints"
    deadline = time.time() + 120
    while not (ck / "step00000004").exists() and time.time() < deadline:
        time.sleep(0.2)
    assert (ck / "step00000004").exists(), "no checkpoint appeared"
    time.sleep(1.0)
    pid = _rank_pid(tmp_path / "runs" / "crash" / "rank1.log")
    os.kill(pid, signal.SIGKILL)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    crash, ref_s = summary(tmp_path / "runs" / "crash"), summary(uncut[2])
    assert crash["step"] == 12 and crash["pid"] != pid
    assert crash["param_checksum"] == ref_s["param_checksum"]
    assert "resumed from" in (tmp_path / "runs" / "crash" / "rank1.log").read_text()


def _rank_pid(log: Path) -> int:
    for line in log.read_text().splitlines():
        if "pid=" in line:
            return int(line.split("pid=")[1].split()[0])
    raise AssertionError("rank log has no pid")


@pytest.mark.parametrize("args,expect", [
    (["lr=fast"], "lr=fast"),
    (["dist.grad_acum=2"], "dist.grad_accum"),
    (["global_batch_size=15", "--procs", "2"], "not divisible by world size 2"),
    (["--gpus", "2"], "only 0 GPU"),
    (["--procs", "2", "--gpus", "1"], "either --gpus"),
    (["--num-gpu", "2"], "--gpus"),
    (["--config", "nope"], "'nope' not found"),
])
def test_bad_input_gives_one_line(tmp_path, args, expect):
    p = run_cli(["train", "toy", *args], tmp_path, check=False)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0] and lines[0].startswith("distlab: error:")
    assert not (tmp_path / "runs").exists()  # nothing started


def test_unknown_recipe(tmp_path):
    p = run_cli(["train", "hmr"], tmp_path, check=False)
    assert p.returncode == 2 and "did you mean hrm" in p.stderr


def test_fsdp2_trains_and_resumes_on_other_world_size(tmp_path, uncut):
    _run(tmp_path, "fsdp", "dist.wrap=fsdp", "run.stop_at=6", procs=2)
    _run(tmp_path, "fsdp", "dist.wrap=fsdp")  # resharded onto a single rank
    a, b = losses(uncut[2]), losses(tmp_path / "runs" / "fsdp")  # against DDP on 2 ranks
    assert b == pytest.approx(a, rel=1e-4, abs=1e-5)


def test_export_and_eval(tmp_path, uncut):
    run_dir = tmp_path / "runs" / "e"
    shutil.copytree(uncut[2], run_dir)  # export and eval write into the run: a copy keeps the shared one as trained
    p = run_cli(["export", str(run_dir)], tmp_path)
    assert (run_dir / "model.pt").exists() and "wrote" in p.stdout
    run_cli(["eval", str(run_dir), "--procs", "2"], tmp_path)
    ev = json.loads((run_dir / "eval" / "step00000012" / "eval.json").read_text())
    assert ev["examples"] == 64 and ev["token_accuracy"] == pytest.approx(summary(run_dir)["eval"]["token_accuracy"])
