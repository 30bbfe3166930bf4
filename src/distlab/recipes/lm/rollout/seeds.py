"""Seeds of sampled rollouts, so a resumed run draws exactly the completions the uninterrupted one drew."""

from __future__ import annotations

import torch


def rollout_seed(run_seed: int, step: int, rank: int) -> int:
    """A seed from (run seed, step, rank): no RNG state to checkpoint, and ranks never share a stream."""
    return (run_seed * 1_000_003 + step * 7919 + rank * 104_729) % 2**31


def control_permutation(n: int, seed: int) -> torch.Tensor:
    """The shuffled-reward control arm's permutation of a step's ``n`` rewards (GRPO's completions, SCoRe's episode
    pairs), drawn from ``seed`` alone so a resumed run permutes exactly as the uninterrupted one did."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed + 65_537))
