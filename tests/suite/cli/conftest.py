"""Fixtures for ``distlab suite`` command tests: a tiny Sudoku dataset built once, tiny suites, the CLI.

Runs are real ``distlab train hrm`` processes kept to a few seconds each: the dataset is built once per
session and every tiny suite points ``data.path`` at it, so no run spends time generating puzzles.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slurm_cluster import slurm  # noqa: F401  (session fixture: a real local SLURM cluster)

# a model small enough for a few steps per second on one CPU core, deterministic (no bf16, no compile)
TINY = {"global_batch_size": 8, "steps": 4, "eval_every": 2, "lr": 1.0e-3, "lr_warmup_steps": 1,
        "optimizer": "adamw", "log.every": 1, "arch.hidden_size": 32, "arch.num_heads": 2, "arch.H_layers": 1,
        "arch.L_layers": 1, "arch.H_cycles": 1, "arch.L_cycles": 1, "arch.halt_max_steps": 2,
        "arch.puzzle_emb_ndim": 0, "arch.forward_dtype": "float32"}


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """32 train / 16 test easy generated puzzles (about a second to build)."""
    from distlab.recipes.hrm.data.sudoku import build_sudoku

    path = tmp_path_factory.mktemp("data") / "sudoku-tiny"
    build_sudoku(path, train_size=32, test_size=16, blanks=16, workers=1, num_aug=1, verbose=False)
    return path


@pytest.fixture
def tiny_suite(tiny_data):
    """``tiny_suite(path, experiments, base=None)`` writes a suite YAML over the tiny dataset (first = baseline)."""

    def write(path: Path, experiments: dict, base: dict | None = None) -> Path:
        spec = {"description": "tiny test suite", "recipe": "hrm",
                "base": {**TINY, "data.path": str(tiny_data), **(base or {})},
                "baseline": next(iter(experiments)), "experiments": experiments}
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        return path

    return write


def run_cli(args: list[str], cwd: Path, timeout: float = 300, env: dict | None = None):
    """The real ``distlab`` command in a subprocess, as a user runs it."""
    full_env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.run([sys.executable, "-m", "distlab.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


@pytest.fixture
def cli():
    return run_cli
