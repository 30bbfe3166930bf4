"""Automatic micro-batch size (``dist.auto_micro_batch=true``): the largest that fits, the rest by accumulation.

A rank's share of the global batch is split into ``dist.grad_accum`` equal micro-batches, taken in order
from the indices the sampler gives, so the global batch, the samples of each step and their order do
not change; only how many go through the model at once does. The probe runs the recipe's real
forward and backward on the largest candidate first and halves through the divisors of the
per-rank batch until one passes without a CUDA out-of-memory error. Ranks then agree on the
smallest size any of them found (every rank must accumulate the same number of times for DDP).

On a CPU there is no device capacity to probe: the option keeps ``dist.grad_accum`` and says so.
Tests stand in a capacity with ``DISTLAB_FAKE_MICRO_BATCH_LIMIT=N`` (micro-batches over N raise the
out-of-memory error a GPU would).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import torch

from distlab.errors import DistlabError

log = logging.getLogger("distlab")

FAKE_LIMIT_ENV = "DISTLAB_FAKE_MICRO_BATCH_LIMIT"


def candidates(per_rank: int) -> list[int]:
    """Micro-batch sizes that split ``per_rank`` into equal parts, largest first."""
    return [d for d in range(per_rank, 0, -1) if per_rank % d == 0]


def fake_limit() -> int | None:
    value = os.environ.get(FAKE_LIMIT_ENV)
    return int(value) if value else None


def _fits(size: int, probe: Callable[[int], None], device: torch.device) -> bool:
    """Run one probe; False on an out-of-memory error (real, or the test stand-in)."""
    limit = fake_limit()
    try:
        if limit is not None and size > limit:
            raise torch.OutOfMemoryError(f"{FAKE_LIMIT_ENV}={limit}: micro-batch {size} does not fit")
        probe(size)
        return True
    except torch.OutOfMemoryError:
        return False
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()


def largest_fitting(per_rank: int, probe: Callable[[int], None], device: torch.device) -> int:
    """Binary search over :func:`candidates` (fitting is monotone in the size); 0 if not even 1 fits."""
    sizes = candidates(per_rank)  # descending
    lo, hi, best = 0, len(sizes) - 1, 0
    while lo <= hi:  # find the first (largest) size that fits
        mid = (lo + hi) // 2
        if _fits(sizes[mid], probe, device):
            best, hi = sizes[mid], mid - 1
        else:
            lo = mid + 1
    return best


def choose_micro_batch(per_rank: int, probe: Callable[[int], None], device: torch.device, rt) -> dict:
    """``{"micro_batch", "grad_accum", "per_rank_batch", "probed"}`` agreed by every rank."""
    if per_rank < 1:
        raise DistlabError(f"dist.auto_micro_batch: each rank holds {per_rank} examples per step; nothing to split")
    probed = device.type == "cuda" or fake_limit() is not None
    if probed:
        found = largest_fitting(per_rank, probe, device)
    else:
        found = per_rank
        log.info("dist.auto_micro_batch: no device memory to probe on the CPU; keeping the whole per-rank "
                 "batch (%d) in one micro-batch", per_rank)
    found = min(rt.all_gather_object(found))
    if found == 0:
        raise DistlabError(f"dist.auto_micro_batch: not even a micro-batch of 1 fits on {device}; see `distlab "
                           f"doctor` for the memory estimate, or use dist.activation_checkpointing=blocks, "
                           f"optim.state_dtype=int8, dist.wrap=fsdp")
    plan = {"micro_batch": found, "grad_accum": per_rank // found, "per_rank_batch": per_rank, "probed": probed}
    log.info("dist.auto_micro_batch: micro-batch %d x %d accumulation steps per rank", found, plan["grad_accum"])
    return plan
