"""The SCoRe demo shows its RL steps on the console (count, rate, ETA and the two accuracies), and a SCoRe
evaluation keeps each problem's turns in its file: what a user following the README sees and reads."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from score_cli import run_cli  # noqa: E402

SMALL = ["steps=2", "sft_steps=2", "task.eval_size=4", "task.train_size=32", "prompts_per_step=2",
         "num_generations=2", "micro_batch_size=4", "run.name=demo"]


def test_the_demo_prints_its_steps_and_keeps_the_turns_it_evaluated(tmp_path):
    p = run_cli(["train", "score", "--config", "demo-cpu", *SMALL], tmp_path)
    steps = [x for x in p.stderr.splitlines() if " step 1/2 " in x or " step 2/2 " in x]
    assert steps and all("step/s" in x or "s/step" in x for x in steps), p.stderr
    assert "eta " in steps[0] and "acc_t1=" in steps[0] and "acc_t2=" in steps[0]
    rows = json.loads((tmp_path / "runs" / "demo" / "eval_step000002_problems.json").read_text())
    assert len(rows) == 4 and all(isinstance(r["y1"], str) and isinstance(r["y2"], str) for r in rows)
