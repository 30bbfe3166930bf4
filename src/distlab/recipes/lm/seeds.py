"""Seeds of sampled rollouts, so a resumed run draws exactly the completions the uninterrupted one drew."""

from __future__ import annotations


def rollout_seed(run_seed: int, step: int, rank: int) -> int:
    """A seed from (run seed, step, rank): no RNG state to checkpoint, and ranks never share a stream."""
    return (run_seed * 1_000_003 + step * 7919 + rank * 104_729) % 2**31
