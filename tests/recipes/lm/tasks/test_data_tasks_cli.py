"""``distlab data tasks``: a built-in set written as JSONL loads back as the same tasks; bad input is one line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from clitools import run_cli  # noqa: E402

from distlab.recipes.lm.tasks import load_tasks  # noqa: E402


def test_a_written_set_trains_as_the_same_tasks(tmp_path):
    out = tmp_path / "syn.jsonl"
    proc = run_cli(["data", "tasks", "synthetic", "--n", "7", "--seed", "3", "-o", str(out)], tmp_path)
    assert "wrote 7 synthetic train tasks" in proc.stdout
    assert load_tasks(str(out), "train") == load_tasks("synthetic", "train", n=7, seed=3)


@pytest.mark.parametrize("args, said", [
    (["nope", "-o", "x.jsonl"], "unknown task set 'nope'"),
    (["synthetic", "-o", "x.jsonl"], "give their number with --n"),
    (["synthetic", "--n", "0", "-o", "x.jsonl"], "--n 0 is invalid"),
    (["humaneval", "-o", "missing/x.jsonl"], "folder missing does not exist"),
    (["synthetic", "--n", "2", "-o", "taken.jsonl"], "exists; choose another --output or add --force"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, said):
    (tmp_path / "taken.jsonl").write_text("keep\n")
    proc = run_cli(["data", "tasks", *args], tmp_path, check=False)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken.jsonl"]
    assert (tmp_path / "taken.jsonl").read_text() == "keep\n"
