"""``distlab slurm RECIPE``: the script validates at write time, runs the training, and takes extra overrides."""

import json
import os
import subprocess
import sys

from clitools import run_cli


def test_script_runs_the_job_with_overrides_given_to_it(tmp_path):
    out = run_cli(["slurm", "toy", "steps=2", "num_examples=64", "global_batch_size=8", "d_model=16",
                   "eval_examples=16", "--gpus", "0", "--python", sys.executable, "-o", "job.sh"], tmp_path)
    assert "sbatch" in out.stdout
    text = (tmp_path / "job.sh").read_text()
    assert "#SBATCH --requeue" in text and "#SBATCH --signal=B:USR1@" in text and "--gres" not in text
    assert subprocess.run(["bash", "-n", str(tmp_path / "job.sh")]).returncode == 0
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("SLURM_JOB_ID", None)
    proc = subprocess.run(["bash", str(tmp_path / "job.sh"), "steps=3"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1
    summary = json.loads((runs[0] / "summary.json").read_text())
    assert summary["step"] == 3 and summary["status"] == "completed"  # 'sbatch job.sh steps=3' overrides steps=2


def test_bad_config_fails_when_the_script_is_written(tmp_path):
    proc = run_cli(["slurm", "toy", "stepz=3", "--gpus", "0", "-o", "job.sh"], tmp_path, check=False)
    assert proc.returncode == 2 and "did you mean steps" in proc.stderr and not (tmp_path / "job.sh").exists()
