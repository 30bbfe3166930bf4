"""``distlab suite slurm`` scripts on a real local SLURM cluster, with real ``distlab train hrm`` runs.

Uses the session fixture ``slurm`` (tests/slurm_cluster.py): skipped without root unless DISTLAB_REQUIRE_SLURM
is set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from distlab.cli import main

JOB_ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
EVAL_KEYS = ("exact_accuracy", "token_accuracy", "count", "mean_steps", "q_halt_accuracy", "flops")


def _slurm_args(suite_file: Path, *extra: str) -> list[str]:
    return ["suite", "slurm", str(suite_file), "--gpus-per-node", "0", "--mem", "2G", "--time", "10",
            "--python", sys.executable, "--out", "slurm", "--root", "res", *extra]


def test_suite_scripts_run_a_two_process_suite_on_slurm(slurm, tmp_path, tiny_suite, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    suite_file = tiny_suite(tmp_path / "tiny.yaml", {"base": {}, "fast_lr": {"lr": 3.0e-3}})
    assert main(_slurm_args(suite_file, "--seeds", "1", "--procs", "2", "--cpus-per-task", "2")) == 0
    assert "bash slurm/submit_all.sh" in capsys.readouterr().out
    out = subprocess.run(["bash", "slurm/submit_all.sh"], cwd=tmp_path, env={**slurm.env, **JOB_ENV},
                         capture_output=True, text=True, timeout=60, check=True).stdout
    job_ids = [line.rsplit(" ", 1)[1] for line in out.splitlines() if "-> job" in line]
    assert len(job_ids) == 2
    for job_id in job_ids:
        tasks = slurm.wait_final(job_id, timeout=300)
        assert [t["JobState"] for t in tasks] == ["COMPLETED"], tasks
    for exp in ("base", "fast_lr"):
        run = tmp_path / "res" / "tiny" / exp / "seed0"
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["step"] == 4
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["world_size"] == 2, manifest
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        assert cfg["global_batch_size"] == 16  # scale.batch=linear over 2 processes
    assert main(["suite", "report", str(suite_file), "--root", "res"]) == 0
    assert (tmp_path / "res" / "tiny" / "report" / "report.json").is_file()


def test_usr1_requeues_a_real_training_run_which_resumes_to_the_uninterrupted_result(slurm, tmp_path, tiny_suite,
                                                                                      monkeypatch):
    monkeypatch.chdir(tmp_path)
    steps = 40
    suite_file = tiny_suite(tmp_path / "long.yaml", {"long": {}},
                            base={"steps": steps, "eval_every": 20, "ckpt.every": 1})
    assert main(_slurm_args(suite_file, "--seeds", "1", "--procs", "1", "--cpus-per-task", "1")) == 0
    job_id = slurm.sbatch(tmp_path / "slurm" / "long.sbatch", cwd=tmp_path)
    run = tmp_path / "res" / "long" / "long" / "seed0"
    deadline = time.monotonic() + 120
    while len(list((run / "checkpoints").glob("step*"))) < 3:
        assert time.monotonic() < deadline, slurm.jobs(job_id)
        time.sleep(0.1)
    slurm.cmd("scancel", "--signal=USR1", "--batch", job_id)
    slurm.wait(job_id, lambda js: js[0].get("Restarts") == "1" and js[0].get("JobState") == "PENDING", timeout=120)
    stopped = json.loads((run / "summary.json").read_text())
    assert stopped["status"] == "preempted" and 3 <= stopped["step"] < steps, stopped
    # the uninterrupted reference: the same suite run here, in one process, while the job resumes
    ref = subprocess.Popen([sys.executable, "-m", "distlab.cli", "suite", "run", str(suite_file), "--seeds", "1",
                            "--procs", "1", "--root", "ref", "--no-report"], cwd=tmp_path,
                           env={**os.environ, **JOB_ENV}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    slurm.release(job_id)
    job = slurm.wait_final(job_id, timeout=300)[0]
    assert job["JobState"] == "COMPLETED" and job["Restarts"] == "1", job
    ref_out = ref.communicate(timeout=300)[0]
    assert ref.returncode == 0, ref_out

    final = json.loads((run / "summary.json").read_text())
    want = json.loads((tmp_path / "ref" / "long" / "long" / "seed0" / "summary.json").read_text())
    assert final["status"] == "completed" and final["step"] == want["step"] == steps
    # single process on CPU, RNG + sampler + ACT carry checkpointed: the resumed run is bit-identical
    assert {k: final["eval"][k] for k in EVAL_KEYS} == {k: want["eval"][k] for k in EVAL_KEYS}
    assert final["train"]["loss"] == want["train"]["loss"]
    log = next((tmp_path / "slurm" / "logs").glob("long-long_*_0.out")).read_text()
    assert "requeueing job" in log and "resumed from" in log
