"""Generated scripts on a real single-node SLURM: array jobs complete, and preemption requeues and resumes.

Uses the session fixture ``slurm`` (tests/slurm_cluster.py); skipped without root unless
DISTLAB_REQUIRE_SLURM is set.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import yaml

from distlab.suite.slurm import REQUEUE_EXIT_CODE, SbatchOptions, render_script, write_slurm_scripts
from distlab.suite.spec import load_suite
from slurm_cluster import launch_args, recorded, write_recorder

# Stands in for the python interpreter of a training job: records its arguments in run.dir and finishes.
FAKE_PYTHON = """#!/bin/bash
for a in "$@"; do case "$a" in run.dir=*) parent=${a#run.dir=} ;; run.name=*) name=${a#run.name=} ;; esac; done
dir=$parent/$name
mkdir -p "$dir"
printf '%s\\n' "$@" > "$dir/argv.txt"
echo '{"exact_accuracy": 1.0}' > "$dir/summary.json"
"""

# A training loop in miniature: deterministic state, checkpoint on SIGUSR1 at a step boundary, resume.
# Mode "exit75" stops with the requeue exit code; mode "summary" does what distlab's trainer does: writes a
# summary.json with status "preempted" and exits 0, so only the done-file check can tell it is not finished.
LOOP = f"""
import json, os, signal, sys, time
from pathlib import Path
run, total, mode = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
run.mkdir(parents=True, exist_ok=True)
ckpt = run / "ckpt.json"
stop = False
def on_usr1(signum, frame):
    global stop
    stop = True
signal.signal(signal.SIGUSR1, on_usr1)
state = json.loads(ckpt.read_text()) if ckpt.exists() else {{"step": 0, "acc": 1}}
print("start at", state["step"], flush=True)
while state["step"] < total:
    state["acc"] = (state["acc"] * 31 + state["step"] ** 2) % 1000003
    state["step"] += 1
    (run / "progress").write_text(str(state["step"]))
    time.sleep(0.05)
    if stop:
        (run / "ckpt.tmp").write_text(json.dumps(state))
        os.replace(run / "ckpt.tmp", ckpt)
        print("checkpointed at", state["step"], flush=True)
        if mode == "exit75":
            sys.exit({REQUEUE_EXIT_CODE})
        (run / "summary.json").write_text(json.dumps({{"status": "preempted", **state}}))
        sys.exit(0)
(run / "summary.json").write_text(json.dumps({{"status": "completed", **state}}))
"""
STEPS = 60


def test_generated_suite_scripts_complete_on_slurm(slurm, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    suite_file = tmp_path / "tiny.yaml"
    suite_file.write_text(yaml.safe_dump({"description": "two configs", "recipe": "hrm", "base": {"steps": 3},
                                          "baseline": "a", "experiments": {"a": {}, "b": {"lr": 0.5}}}))
    fake = tmp_path / "fakepython"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    suite = load_suite(suite_file)
    bundle = write_slurm_scripts(suite, tmp_path / "slurm", gpus_per_node=0, nodes=1, cpus_per_task=1, mem="100M",
                                 time="5", seeds=2, python=str(fake))
    out = subprocess.run([str(bundle.submit_all)], cwd=project, env=slurm.env, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    job_ids = [line.rsplit(" ", 1)[1] for line in out.splitlines() if "-> job" in line]
    assert len(job_ids) == 2
    for job_id in job_ids:
        tasks = slurm.wait_final(job_id, timeout=60)
        assert sorted(t["ArrayTaskId"] for t in tasks) == ["0", "1"]
        assert {t["JobState"] for t in tasks} == {"COMPLETED"}, tasks
    for run in suite.runs(2):
        recorded = (project / run.out_dir / "argv.txt").read_text().splitlines()
        assert recorded == ["-m", "distlab.cli", "train", "hrm", "--procs", "1", *run.overrides]
    logs = sorted(bundle.log_dir.glob("tiny-*_*_*.out"))
    assert len(logs) == 4 and all("training exited with status 0" in p.read_text() for p in logs)


@pytest.mark.parametrize("launcher, mode", [("", "summary"), ("srun --ntasks=1", "exit75")],
                         ids=["direct-preempted-summary", "srun-exit75"])
def test_usr1_checkpoints_requeues_and_resumes_to_the_same_result(slurm, tmp_path, launcher, mode):
    loop = tmp_path / "loop.py"
    loop.write_text(LOOP)
    reference = tmp_path / "reference"
    subprocess.run([sys.executable, str(loop), str(reference), str(STEPS), mode], check=True, timeout=60)

    run = tmp_path / "run"
    opts = SbatchOptions(job_name="requeue", time="10", mem="100M", signal_s=60,
                         output=str(tmp_path / "%x_%A_%a.out"))
    script = tmp_path / "job.sbatch"
    done = [str(run / "summary.json")] if mode == "summary" else None
    script.write_text(render_script(opts, [[sys.executable, str(loop), str(run), str(STEPS), mode]], launcher,
                                    done_files=done, python=sys.executable))
    job_id = slurm.sbatch(script, cwd=tmp_path)

    deadline = time.monotonic() + 60
    while not ((run / "progress").exists() and int((run / "progress").read_text() or 0) >= 5):
        assert time.monotonic() < deadline, slurm.jobs(job_id)
        time.sleep(0.1)
    slurm.cmd("scancel", "--signal=USR1", "--batch", job_id)
    slurm.wait(job_id, lambda js: js[0].get("Restarts") == "1" and js[0].get("JobState") == "PENDING")
    assert not (run / "summary.json").exists() or "preempted" in (run / "summary.json").read_text()
    stopped_at = json.loads((run / "ckpt.json").read_text())["step"]
    assert 5 <= stopped_at < STEPS
    slurm.release(job_id)
    job = slurm.wait_final(job_id)[0]
    assert job["JobState"] == "COMPLETED" and job["Restarts"] == "1"
    final = json.loads((run / "summary.json").read_text())
    assert final["status"] == "completed"
    assert final == json.loads((reference / "summary.json").read_text())
    log = next(tmp_path.glob("requeue_*_0.out")).read_text()
    assert "start at 0" in log and f"checkpointed at {stopped_at}" in log and f"start at {stopped_at}" in log
    status = REQUEUE_EXIT_CODE if mode == "exit75" else 0
    assert f"training exited with status {status}" in log and "requeueing job" in log


# The local cluster's node offers 8 stand-in GPUs (scripts/slurm_local.sh): GPU scripts are submitted unchanged and
# scheduled, and a recorder in place of the interpreter shows what each node would exec.

def test_gpu_suite_job_is_scheduled_on_gpus_and_execs_distlab_train_gpus(slurm, tmp_path):
    record = tmp_path / "record"
    fake = write_recorder(tmp_path / "fakepython", record)
    bundle = write_slurm_scripts(load_suite("baseline"), tmp_path / "slurm", gpus_per_node=8, nodes=1,
                                 cpus_per_task=1, mem="100M", time="5", seeds=1, python=str(fake),
                                 setup=["export FROM_SETUP=1"])
    out = subprocess.run([str(bundle.submit_all)], cwd=tmp_path, env=slurm.env, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    job_id = out.split("-> job ")[1].split()[0]
    assert [t["JobState"] for t in slurm.wait_final(job_id)] == ["COMPLETED"]
    argv, env = recorded(record)
    opts, overrides = launch_args(argv)
    assert opts.gpus == 8 and opts.procs is None and "dist.backend=gloo" not in overrides
    assert env["SLURM_GPUS_ON_NODE"] == "8" and env["FROM_SETUP"] == "1"


def test_two_node_script_runs_its_launcher_under_srun_with_the_node_rank(slurm, tmp_path):
    """This cluster has one node, so the 2-node script is submitted with sbatch --nodes=1 (the command line wins
    over #SBATCH): srun, the per-node wrapper and the rendezvous address are the real ones."""
    record = tmp_path / "record"
    fake = write_recorder(tmp_path / "fakepython", record)
    bundle = write_slurm_scripts(load_suite("baseline"), tmp_path / "slurm", gpus_per_node=2, nodes=2,
                                 cpus_per_task=1, mem="100M", time="5", seeds=1, python=str(fake))
    job_id = slurm.cmd("sbatch", "--parsable", "--nodes=1", str(bundle.scripts[0]), cwd=tmp_path).strip()
    assert [t["JobState"] for t in slurm.wait_final(job_id)] == ["COMPLETED"]
    argv, env = recorded(record)
    opts, _ = launch_args(argv)
    host = slurm.cmd("scontrol", "show", "hostnames", env["SLURM_JOB_NODELIST"]).split()[0]
    assert (opts.gpus, opts.procs, opts.nodes, opts.node_rank, opts.rdzv_backend) == (2, None, 2, 0, "c10d")
    assert (opts.master_addr, opts.master_port) == (host, 20000 + int(job_id) % 20000)
    assert "SLURM_STEP_ID" in env and "SLURM_PROCID" not in env  # started by srun, not taken for a rank


def test_distlab_slurm_gpu_script_runs_train_gpus_with_sbatch_overrides(slurm, tmp_path):
    from clitools import run_cli

    record = tmp_path / "record"
    fake = write_recorder(tmp_path / "fakepython", record)
    run_cli(["slurm", "toy", "steps=2", "--gpus", "2", "--cpus-per-task", "1", "--mem", "100M", "--time", "5",
             "--python", str(fake), "--setup", "export FROM_SETUP=1", "-o", "job.sh"], tmp_path)
    job_id = slurm.cmd("sbatch", "--parsable", "job.sh", "steps=5", cwd=tmp_path).strip()
    assert [t["JobState"] for t in slurm.wait_final(job_id)] == ["COMPLETED"]
    argv, env = recorded(record)
    opts, overrides = launch_args(argv)
    assert (opts.gpus, opts.procs, opts.nodes) == (2, None, 1) and overrides[-1] == "steps=5"
    assert env["SLURM_GPUS_ON_NODE"] == "2" and env["FROM_SETUP"] == "1"
