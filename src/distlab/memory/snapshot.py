"""``log.memory_snapshot=true``: a PyTorch memory snapshot of a run's first steps, for the memory viewer.

Every CUDA allocation and free of the first :data:`SNAPSHOT_STEPS` optimizer steps is recorded with its
stack (``torch.cuda.memory._record_memory_history``) and written to ``memory_snapshot_rank<R>.pickle``
in the run directory; drag it onto https://pytorch.org/memory_viz to see what held memory when.
Recording slows steps, so it stops after the dump. CPU runs have no allocator history: they get one
warning and train on.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

log = logging.getLogger("distlab")

SNAPSHOT_STEPS = 3
MAX_ENTRIES = 200_000  # allocation events kept; a few steps of an LLM stay well under this


class MemorySnapshot:
    """Starts recording at construction (when enabled on CUDA) and dumps once the first steps are done."""

    def __init__(self, enabled: bool, device: torch.device, run_dir: Path, rank: int,
                 steps: int = SNAPSHOT_STEPS) -> None:
        self.path = Path(run_dir) / f"memory_snapshot_rank{rank}.pickle"
        self.steps = steps
        self.recording = False
        if not enabled:
            return
        if device.type != "cuda":
            if rank == 0:
                log.warning("log.memory_snapshot=true records CUDA allocations only; this run is on %s, so no "
                            "snapshot is written", device.type)
            return
        torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES)
        self.recording = True

    def after_step(self, steps_done: int) -> None:
        """Dump and stop once ``steps`` steps of this process are done."""
        if self.recording and steps_done >= self.steps:
            self.close()

    def close(self) -> None:
        """Write the snapshot (if still recording) and stop recording."""
        if not self.recording:
            return
        self.recording = False
        try:
            torch.cuda.memory._dump_snapshot(str(self.path))
            log.info("memory snapshot of the first steps: %s (open it at https://pytorch.org/memory_viz)", self.path)
        finally:
            torch.cuda.memory._record_memory_history(enabled=None)
