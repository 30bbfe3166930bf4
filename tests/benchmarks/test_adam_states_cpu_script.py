"""benchmarks/adam_states_cpu.py: one row of step times per state dtype; bad arguments refused in one line."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "adam_states_cpu.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_times_every_step_of_every_state_dtype():
    proc = _run("--shapes", "64x32,16x16", "--states", "fp32,bf16", "--steps", "2")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("0.0M parameters in 2 tensors")
    rows = [ln.split(" | ") for ln in lines[2:]]
    assert [r[0] for r in rows] == ["fp32", "bf16"] and all(len(r) == 3 for r in rows)
    assert all(float(x) >= 0 for r in rows for x in r[1:])


def test_bad_arguments_are_one_line():
    for args in (["--states", "int9"], ["--steps", "0"], ["--shapes", "3x"], ["--shapes", "0x4"]):
        proc = _run(*args)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("adam_states_cpu.py:"), proc.stderr
