"""Turning dataset rows into model batches (shared by training and evaluation)."""

from __future__ import annotations

import numpy as np
import torch

from distlab.recipes.hrm.data.format import PuzzleSplit


def make_batch(split: PuzzleSplit, idx: np.ndarray, device: torch.device, arrays=None) -> dict[str, torch.Tensor]:
    """Rows ``idx`` as tensors; labels equal to the dataset's ignore id become -100."""
    inputs, labels, pids = arrays if arrays is not None else split.example_arrays()
    order = np.argsort(idx, kind="stable")  # memory-mapped reads are faster in index order
    sorted_idx = idx[order]
    inv = np.empty_like(order)
    inv[order] = np.arange(len(order))
    x = torch.from_numpy(np.asarray(inputs[sorted_idx])[inv].astype(np.int64))
    y = torch.from_numpy(np.asarray(labels[sorted_idx])[inv].astype(np.int64))
    y[y == split.metadata.ignore_label_id] = -100
    p = torch.from_numpy(np.asarray(pids[sorted_idx])[inv].astype(np.int64))
    return {"inputs": _to_device(x, device), "labels": _to_device(y, device), "puzzle_identifiers": _to_device(p, device)}


def _to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """An asynchronous copy to a GPU: from pinned memory, since a copy from pageable memory may wait for the
    stream (every kernel queued so far) before it starts, which stalls the host once per step."""
    if device.type == "cuda":
        t = t.pin_memory()
    return t.to(device, non_blocking=True)
