"""benchmarks/archive/gpu_grpo_smol_families.sh with SMOKE=1: the device script's own command lines, run on this CPU with
the tiny model, so a bad setting fails here and not in a GPU session."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "archive" / "gpu_grpo_smol_families.sh"
HELD_OUT = {"affine", "poly", "less_than", "lower_str", "min_of_list", "count_list"}


def _stage(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SMOKE="1", OUT=str(tmp_path / "out"), RUNS=str(tmp_path / "runs"), OMP_NUM_THREADS="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "out").mkdir(exist_ok=True)
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)


def test_train_then_eval_scores_every_held_out_family(tmp_path):
    train = _stage(tmp_path, "train", "control")
    assert train.returncode == 0, train.stdout[-2000:] + train.stderr[-2000:]
    out = tmp_path / "out"
    assert (out / "smol-families-control_metrics.jsonl").is_file()
    evals = sorted(p.name for p in out.glob("smol-families-control_eval*_problems.json"))
    assert evals[0] == "smol-families-control_eval_start_step000000_problems.json" and len(evals) == 3
    run = _stage(tmp_path, "eval", "control")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    problems = json.loads((out / "smol-families-control_heldout_problems.json").read_text())
    families = {r["task_id"].split("/")[1] for r in problems["before"]}
    assert families == HELD_OUT and len(problems["before"]) == len(problems["after"]) == 12
    config = (tmp_path / "runs" / "smol-families-control" / "config.yaml").read_text()
    assert "shuffle_rewards: true" in config


def test_an_unknown_arm_is_refused_in_one_line(tmp_path):
    proc = _stage(tmp_path, "train", "grpo2")
    assert proc.returncode == 2 and proc.stdout.strip() == "arm must be grpo or control, not grpo2"
