"""Generated sbatch scripts: valid bash, the right #SBATCH directives, launch lines and requeue logic."""

from __future__ import annotations

import os
import re
import shlex
import subprocess

import pytest

from distlab.errors import DistlabError
from distlab.suite.slurm import REQUEUE_EXIT_CODE, write_slurm_scripts
from distlab.suite.spec import load_suite


def directives(path) -> list[str]:
    return re.findall(r"^#SBATCH (\S+)", path.read_text(), flags=re.M)


def bash_n(path) -> None:
    res = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_multi_node_gpu_scripts(tmp_path):
    suite = load_suite("hierarchical")
    bundle = write_slurm_scripts(suite, tmp_path / "slurm", gpus_per_node=8, nodes=2, cpus_per_task=32,
                                 mem="256G", time="12:00:00", seeds=3, partition="gpu", account="lab",
                                 extra_sbatch=["--constraint=h100", "#SBATCH --exclusive"], signal_s=300)
    assert sorted(p.stem for p in bundle.scripts) == sorted(suite.experiments)
    for script in [*bundle.scripts, bundle.submit_all]:
        bash_n(script)
        assert os.access(script, os.X_OK)
    script = tmp_path / "slurm" / "H4xL2.sbatch"
    d = directives(script)
    for want in ("--job-name=hierarchical-H4xL2", "--nodes=2", "--gres=gpu:8", "--cpus-per-task=32", "--mem=256G",
                 "--time=12:00:00", "--array=0-2", "--requeue", "--signal=B:USR1@300", "--partition=gpu",
                 "--account=lab", "--constraint=h100", "--exclusive", "--open-mode=append"):
        assert want in d, want
    text = script.read_text()
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in text
    assert re.search(r"srun .*-m torch\.distributed\.run --nnodes \"\$SLURM_NNODES\" --nproc-per-node 8 .*"
                     r"--rdzv-backend c10d --rdzv-endpoint \"\$MASTER_ADDR:\$MASTER_PORT\" -m distlab\.cli", text)
    assert re.search(r"^export PET_SIGNALS_TO_HANDLE=\S*SIGUSR1", text, flags=re.M)
    assert "trap forward_usr1 USR1" in text and 'kill -USR1 "$CHILD"' in text
    assert 'scontrol requeue "${SLURM_JOB_ID}"' in text and f"REQUEUE_EXIT={REQUEUE_EXIT_CODE}" in text
    # array task k runs exactly the RunSpec of seed k
    runs = [r for r in suite.runs(3) if r.experiment == "H4xL2"]
    for k, run in enumerate(runs):
        line, done = re.search(rf"^  {k}\) CMD=\((.*)\); DONE=(\S+); ;;$", text, flags=re.M).groups()
        assert shlex.split(line) == run.argv("hrm")
        assert shlex.split(done) == [str(run.out_dir / "summary.json")]
    submit = bundle.submit_all.read_text()
    assert all(f"{p.name}" in submit for p in bundle.scripts) and "sbatch --parsable" in submit


def test_single_node_cpu_scripts_omit_gres_and_use_procs(tmp_path):
    write_slurm_scripts(load_suite("augmentation"), tmp_path, gpus_per_node=0, nodes=1, cpus_per_task=4,
                        mem="8G", time="30", seeds=[4, 9], scale="smoke", procs_per_node=2,
                        python="/opt/py/bin/python3", requeue=False)
    script = tmp_path / "aug300.sbatch"
    bash_n(script)
    d = directives(script)
    assert not any(x.startswith("--gres") for x in d)
    assert "--array=0-1" in d and "--no-requeue" in d and "--requeue" not in d
    text = script.read_text()
    assert "LAUNCH=(/opt/py/bin/python3 -m distlab.cli)" in text
    assert "srun" not in text and "scontrol requeue" not in text
    assert re.search(r"^export PET_SIGNALS_TO_HANDLE=\S*SIGUSR1", text, flags=re.M)  # --procs runs torchrun
    line = re.search(r"^  1\) CMD=\((.*)\); DONE=\S+; ;;$", text, flags=re.M).group(1)
    argv = shlex.split(line)
    assert argv[:4] == ["train", "hrm", "--procs", "2"]
    assert "data.num_aug=3" in argv and "run.seed=9" in argv and "steps=40" in argv


@pytest.mark.parametrize("kwargs, message", [
    ({"mem": "256GB"}, "not a SLURM memory size"), ({"time": "12h"}, "not a SLURM time"),
    ({"nodes": 0}, "at least 1 node"), ({"gpus_per_node": -1}, "gpus_per_node"), ({"signal_s": 0}, "signal_s"),
])
def test_bad_resources_raise(tmp_path, kwargs, message):
    args = dict(gpus_per_node=1, nodes=1, cpus_per_task=1, mem="1G", time="10", seeds=1) | kwargs
    with pytest.raises(DistlabError, match=message):
        write_slurm_scripts(load_suite("baseline"), tmp_path, **args)


def test_cluster_fixture_explains_why_it_cannot_start(monkeypatch):
    import slurm_cluster

    monkeypatch.setattr(slurm_cluster.os, "geteuid", lambda: 1000)
    assert "needs root" in slurm_cluster.unavailable_reason()
