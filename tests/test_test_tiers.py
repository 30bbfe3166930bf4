"""The test tiers come from what tests do: a contributor's `-m "not slow"` must leave out what starts processes or
trains a run, keep pure unit tests, and `-m gpu` / `-m slurm` must find the GPU-only and cluster tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _collected(*args: str) -> set[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=300).stdout
    return {ln.strip() for ln in out.splitlines() if "::" in ln}


def test_fast_tier_leaves_out_what_starts_processes_and_keeps_unit_tests() -> None:
    fast = _collected("-m", "not slow", "tests/run/test_logging.py", "tests/recipes/score/test_score_runs.py")
    assert "tests/run/test_logging.py::test_eta_reads_in_minutes_and_hours" in fast
    assert "tests/run/test_logging.py::test_a_run_ends_with_a_closing_report" not in fast  # runs the command
    # a module's shared trained run: none of the checks that read it are fast, even those measured fast alone
    assert not any("test_score_runs.py" in t for t in fast)


def test_gpu_and_slurm_tiers_find_their_tests() -> None:
    gpu = _collected("-m", "gpu", "tests/recipes/lm/models/test_lm_cuda.py", "tests/run/test_logging.py")
    assert gpu and all("test_lm_cuda.py" in t for t in gpu)
    slurm = _collected("-m", "slurm", "tests/suite")
    assert slurm and all("slurm" in t for t in slurm)
