"""benchmarks/ten_minutes.sh (issue 51's device call) with SMOKE=1: its own command lines on this CPU at tiny size,
both layouts (the 4-GPU one scores the holdouts after the in-run test; --gpus 1 re-scores the whole test on every
device), for the Sudoku presets and the maze one (no holdouts), so a bad setting fails here and not in a GPU
session. And the table's numbers."""

from __future__ import annotations

import json
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


@pytest.fixture
def smoke(tmp_path):
    """``smoke(*args)``: the script with SMOKE=1 in a subprocess, working under tmp_path (a fixture, so the test tiers
    see that it starts processes)."""
    env = dict(os.environ, SMOKE="1", WORK=str(tmp_path), OMP_NUM_THREADS="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=600)

    return run


def _table_and_pack(tmp_path: Path, tag: str, rows: list[str]) -> list[str]:
    """Checks that the table holds exactly ``rows`` (by their start) for a completed 4-step run; the packed files."""
    table = (tmp_path / "out" / f"ten_minutes-{tag}.md").read_text()
    assert [line for line in table.splitlines() if line.startswith("| ") and "dataset" not in line] == [
        line for line in table.splitlines() if any(line.startswith(r) for r in rows)]
    assert all(any(line.startswith(r) for line in table.splitlines()) for r in rows)
    assert table.startswith("run: completed, 4 steps on 2 device(s)")
    return subprocess.run(["tar", "tzf", str(tmp_path / "out" / f"ten_minutes-{tag}.tgz")], capture_output=True,
                          text=True).stdout.split()


@pytest.mark.skipif(not TOP95.exists(), reason="the shared top95 file is absent")
@pytest.mark.parametrize(("gpus", "rows"), [
    ("4", ["| smoke-sudoku | in-run | 24 |", "| tiny-holdout | distlab eval | 6 |", "| top95 | distlab eval | 95 |"]),
    ("1", ["| smoke-sudoku | in-run | 8 |", "| smoke-sudoku | distlab eval | 24 |",
           "| tiny-holdout | distlab eval | 6 |", "| top95 | distlab eval | 95 |"]),
])
def test_smoke_run_scores_the_test_and_both_holdouts(tmp_path, smoke, gpus, rows):
    proc = smoke("--gpus", gpus)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    tag = f"trm-sudoku-4gpu-380s-{gpus}gpu-seed0"
    packed = _table_and_pack(tmp_path, tag, rows)
    assert f"{tag}/eval/eval.json" in packed and f"runs/{tag}/summary.json" in packed
    assert "0 shared with" in (tmp_path / tag / "holdout-build.log").read_text()


@pytest.mark.parametrize(("gpus", "rows"), [
    ("4", ["| smoke-maze | in-run | 24 |"]),  # the run scores the whole test: no distlab eval, no holdouts
    ("1", ["| smoke-maze | in-run | 8 |", "| smoke-maze | distlab eval | 24 |"]),
])
def test_smoke_run_of_the_maze_preset_builds_mazes_and_scores_their_test(tmp_path, smoke, gpus, rows):
    proc = smoke("--gpus", gpus, "trm-maze-4gpu-380s")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    tag = f"trm-maze-4gpu-380s-{gpus}gpu-seed0"
    packed = _table_and_pack(tmp_path, tag, rows)
    assert (f"{tag}/eval/eval.json" in packed) == (gpus == "1") and f"runs/{tag}/summary.json" in packed
    summary = json.loads((tmp_path / "runs" / tag / "summary.json").read_text())
    assert Path(summary["data"]).name == "smoke-maze" and summary["eval"]["samples"] == 3
    meta = json.loads((tmp_path / "data" / "smoke-maze" / "test" / "dataset.json").read_text())
    assert meta["seq_len"] == 900 and meta["vocab_size"] == 6  # 30x30 mazes, HRM's maze charset
    assert not (tmp_path / tag / "holdout-build.log").exists()


@pytest.mark.parametrize(("preset", "words"), [("trm-maze", "builds no data (data.build)"),
                                               ("trm-mazes", "no preset trm-mazes")])
def test_a_preset_it_cannot_build_data_for_is_refused_in_one_line(tmp_path, smoke, preset, words):
    proc = smoke(preset)
    assert proc.returncode == 2 and words in proc.stdout and len(proc.stdout.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()
