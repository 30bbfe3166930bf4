"""benchmarks/ten_minutes.sh (issue 51's device call) with SMOKE=1: its own command lines on this CPU at tiny size,
both layouts (the 4-GPU one scores the holdouts after the in-run test; --gpus 1 re-scores the whole test on every
device), so a bad setting fails here and not in a GPU session. And the table's numbers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "ten_minutes.sh"
TOP95 = ROOT.parent / "shared" / "data" / "sudoku" / "top95.txt"
sys.path.insert(0, str(ROOT / "benchmarks"))
import ten_minutes_table  # noqa: E402


def test_the_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0


def test_wilson_intervals_in_the_table():
    assert ten_minutes_table._pct(0.5, 100) == "50.0% [40.4, 59.6]"
    assert ten_minutes_table._pct(1.0, 95) == "100.0% [96.1, 100.0]"


@pytest.mark.skipif(not TOP95.exists(), reason="the shared top95 file is absent")
@pytest.mark.parametrize(("gpus", "rows"), [
    ("4", ["| smoke-train | in-run | 24 |", "| tiny-holdout | distlab eval | 6 |", "| top95 | distlab eval | 95 |"]),
    ("1", ["| smoke-train | in-run | 8 |", "| smoke-train | distlab eval | 24 |",
           "| tiny-holdout | distlab eval | 6 |", "| top95 | distlab eval | 95 |"]),
])
def test_smoke_run_scores_the_test_and_both_holdouts(tmp_path, gpus, rows):
    env = dict(os.environ, SMOKE="1", WORK=str(tmp_path), OMP_NUM_THREADS="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["bash", str(SCRIPT), "--gpus", gpus], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    tag = f"trm-sudoku-4gpu-380s-{gpus}gpu-seed0"
    table = (tmp_path / "out" / f"ten_minutes-{tag}.md").read_text()
    assert [line for line in table.splitlines() if line.startswith("| ") and "dataset" not in line] == [
        line for line in table.splitlines() if any(line.startswith(r) for r in rows)]
    assert all(any(line.startswith(r) for line in table.splitlines()) for r in rows)
    assert table.startswith("run: completed, 4 steps on 2 device(s)")
    packed = subprocess.run(["tar", "tzf", str(tmp_path / "out" / f"ten_minutes-{tag}.tgz")], capture_output=True,
                            text=True).stdout.split()
    assert f"{tag}/eval/eval.json" in packed and f"runs/{tag}/summary.json" in packed
    assert "0 shared with" in (tmp_path / tag / "holdout-build.log").read_text()
