"""Running the real ``distlab`` command from tests, and reading what a run wrote (importable by any test)."""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def run_cli(args: list[str], cwd: Path, timeout: float = 300, check: bool = True, env: dict | None = None):
    """Run the real ``distlab`` command in a subprocess (as a user would)."""
    full_env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **(env or {}))
    proc = subprocess.run([sys.executable, "-m", "distlab.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env)
    if check and proc.returncode != 0:
        raise AssertionError(f"distlab {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def run_clis(commands: list[list[str]], cwd: Path, **kwargs) -> list[subprocess.CompletedProcess]:
    """Run independent ``distlab`` commands at the same time, each as ``run_cli`` would (results in order): a
    one-rank run keeps one core busy, so runs that do not depend on each other finish sooner side by side."""
    with ThreadPoolExecutor(len(commands)) as pool:
        return list(pool.map(lambda args: run_cli(args, cwd, **kwargs), commands))


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def losses(run_dir: Path) -> list[float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["split"] == "train"]
