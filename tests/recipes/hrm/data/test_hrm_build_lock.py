"""Concurrent runs that need the same missing dataset build it once (suite runs share derived data paths)."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path

from distlab.recipes.hrm.config import DataConfig, HRMConfig


def _config(root: Path) -> HRMConfig:
    return HRMConfig(data=DataConfig(path=str(root / "ds"), build="sudoku", train_size=8, test_size=4, blanks=8,
                                     workers=1))


def _build_in_child(root: str, start: mp.synchronize.Event) -> None:
    import distlab.recipes.hrm.train as train

    real = train._build_dataset

    def counted(cfg, path):
        (Path(root) / f"built-by-{os.getpid()}").touch()
        time.sleep(1.0)  # keep the build slow enough that the other process arrives while it runs
        real(cfg, path)

    train._build_dataset = counted
    start.wait()
    train.ensure_dataset(_config(Path(root)))


def test_two_processes_build_a_missing_dataset_once(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_build_in_child, args=(str(tmp_path), start)) for _ in range(2)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert len(list(tmp_path.glob("built-by-*"))) == 1
    for split in ("train", "test"):
        assert (tmp_path / "ds" / split / "dataset.json").exists()
