"""benchmarks/sandbox_throughput.py: the per-program timing that sets a floor under sandbox.timeout_s."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sandbox_throughput.py"
MBPP = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "mbpp" / "mbpp.jsonl"


@pytest.mark.skipif(not MBPP.exists(), reason="needs ../shared/data/mbpp")
def test_each_program_timed_alone():
    out = subprocess.run([sys.executable, str(SCRIPT), "4", "--each"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    head = re.search(r"passed (\d+)/(\d+); seconds per program: median ([\d.]+), p99 ([\d.]+), max ([\d.]+)",
                     out.stdout)
    assert head and head.group(1) == head.group(2) == "4"
    median, p99, top = (float(head.group(i)) for i in (3, 4, 5))
    assert 0 < median <= p99 <= top
    slowest = re.findall(r"  mbpp/(\d+): ([\d.]+) s", out.stdout)
    assert len(slowest) == 4 and float(slowest[0][1]) == pytest.approx(top, abs=1e-3)


def test_bad_count_refused_in_one_line():
    out = subprocess.run([sys.executable, str(SCRIPT), "-1"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].endswith("N must be 0 or more and WORKERS 1 or more, not -1 and 2")
