"""The EvalPlus-style harness's MBPP problem set: every hand-verified (sanitized) task, 427, written by
``distlab data tasks``. EvalPlus's own 378-task MBPP+ subset is not in the evalplus package, so it is not offered."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from clitools import run_cli  # noqa: E402

from distlab.recipes.lm.tasks import load_tasks  # noqa: E402
from distlab.recipes.lm.tasks.mbpp import ID_RANGES, load_mbpp  # noqa: E402


def test_the_sanitized_split_is_every_hand_verified_task(mbpp_dir):
    every = load_mbpp("sanitized", mbpp_dir)
    file_ids = [r["task_id"] for r in json.loads((mbpp_dir / "sanitized-mbpp.json").read_text())]
    assert len(every) == len(file_ids) == 427
    assert [t.task_id for t in every] == [f"mbpp-sanitized/{i}" for i in sorted(file_ids)]
    parts = [t for split in ID_RANGES for t in load_mbpp(f"sanitized-{split}", mbpp_dir)]
    assert sorted(t.task_id for t in parts) == sorted(t.task_id for t in every)
    assert {t.source for t in every} == {"mbpp-sanitized"}


def test_data_tasks_writes_the_sanitized_set_that_loads_back(tmp_path, mbpp_dir):
    out = tmp_path / "mbpp_sanitized.jsonl"
    proc = run_cli(["data", "tasks", "mbpp", "--split", "sanitized", "--mbpp-dir", str(mbpp_dir), "-o", str(out)],
                   tmp_path)
    assert "wrote 427 mbpp sanitized tasks" in proc.stdout
    assert len(out.read_text().splitlines()) == 427
    assert load_tasks(str(out), "test") == load_tasks("mbpp", "sanitized", mbpp_dir=mbpp_dir)
