"""benchmarks/lm_shapes.py's case runner at its time limit: it says where the run was and never waits on a child.

A case that outlives its limit used to end the whole script without a row: the case's process was killed, but a
process it had started kept the output pipe open, so the script waited until its own budget killed it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import lm_shapes  # noqa: E402


def test_time_out_names_the_distlab_frames_and_ends_the_run(tmp_path):
    cmd = [sys.executable, "-m", "distlab.cli", "train", "toy", "steps=400", "step_delay_s=0.3",
           f"run.dir={tmp_path}", "run.name=slow", "log.progress=false"]
    start = time.monotonic()
    code, said = lm_shapes.run_bounded(cmd, timeout=12, grace_s=3)
    assert code is None and time.monotonic() - start < 30
    where = lm_shapes.where_stuck(said)
    # the innermost distlab frames first: mostly the step delay's sleep in train, on a loaded machine at times a
    # frame it called (backward in training/amp.py), always under train and the worker
    assert where.startswith("stuck in ") and " train (distlab/recipes/toy.py:" in f" {where[9:]}", said[-2000:]
    assert "distlab/launch/worker.py" in where


def test_a_child_holding_the_output_does_not_hold_the_runner():
    code = "import subprocess, time; subprocess.Popen(['sleep', '317']); time.sleep(300)"
    start = time.monotonic()
    rc, said = lm_shapes.run_bounded([sys.executable, "-c", code], timeout=2, grace_s=0.5)
    assert rc is None and time.monotonic() - start < 15
    time.sleep(0.5)
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p) == "sleep 317"]
    assert not left, "the case's child outlived it"
    assert lm_shapes.where_stuck(said) == ""  # not a distlab process: no stacks, the last line is used instead


def test_a_finished_case_reports_its_exit_status():
    rc, said = lm_shapes.run_bounded([sys.executable, "-c", "print('hello'); raise SystemExit(3)"], timeout=30)
    assert rc == 3 and "hello" in said


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def test_a_bad_pick_is_refused_in_one_line_before_anything_is_written(tmp_path):
    import subprocess

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "lm_shapes.py"
    for bad in ("grpo:99", "grpo:a", "nosuch:1", "grpo"):
        out = tmp_path / bad.replace(":", "_")
        proc = subprocess.run([sys.executable, str(script), "--smoke", "--pick", bad, "--out", str(out)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1 and proc.stderr.strip().count("\n") == 0, proc.stderr
        assert f"--pick '{bad}'" in proc.stderr and "grpo (cases 0-8)" in proc.stderr and not out.exists()
    assert lm_shapes.parse_pick("grpo:8;score:6,4", {"grpo": 9, "score": 7}) == {"grpo": [8], "score": [6, 4]}
    assert lm_shapes.parse_pick("", {"grpo": 9}) == {}
