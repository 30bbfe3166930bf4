"""The one learning-rate schedule every recipe uses: linear warm-up, then constant, linear or cosine decay.

Recipes used to carry their own copies (HRM's cosine, the toy's cosine to 10%, GRPO's and SCoRe's
warm-up then constant), which drifted apart in small ways (does step 0 train at lr/warmup or at 0?).
One function with the differences as arguments keeps every recipe's numbers while a fix lands once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from distlab.errors import DistlabError, near_matches

SHAPES = ("constant", "linear", "cosine")


def lr_factor(step: int, warmup_steps: int, total_steps: int, shape: str = "cosine", min_ratio: float = 0.0,
              *, warmup_from_zero: bool = False) -> float:
    """Multiplier of the base lr at 0-based ``step``.

    Warm-up: ``(step + 1) / warmup_steps`` for ``step < warmup_steps``, so the first step already
    trains (GRPO, SCoRe, the toy); ``warmup_from_zero`` gives ``step / warmup_steps`` instead, the
    schedule of HRM's and TRM's ``pretrain.py`` whose step 0 moves nothing. After it, ``constant``
    stays at 1; ``linear`` and ``cosine`` fall from 1 to ``min_ratio`` at ``total_steps`` and stay there.
    """
    if shape not in SHAPES:
        hint = near_matches(shape, SHAPES)
        raise DistlabError(f"unknown lr schedule shape {shape!r}; use one of {', '.join(SHAPES)}"
                           + (f" (did you mean {hint[0]!r}?)" if hint else ""))
    if step < warmup_steps:
        return (step if warmup_from_zero else step + 1) / warmup_steps
    if shape == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    if shape == "linear":
        return min_ratio + (1.0 - min_ratio) * (1.0 - progress)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def set_lr(optimizers: Iterable[torch.optim.Optimizer], step: int, warmup_steps: int, total_steps: int,
           shape: str = "cosine", min_ratio: float = 0.0, *, warmup_from_zero: bool = False) -> list[float]:
    """Set every param group's lr to its ``base_lr`` times :func:`lr_factor`; returns the new lrs in group order.

    A group's ``base_lr`` is recorded from its ``lr`` on the first call, so groups with their own lr
    (HRM's puzzle embeddings) keep their ratio. It travels in the optimizer's state dict: a recipe
    that re-derives its lr on every start (``scale.lr`` on a new world size) sets ``base_lr`` itself
    after restoring.
    """
    lrs = []
    for opt in optimizers:
        for group in opt.param_groups:
            group.setdefault("base_lr", group["lr"])
            group["lr"] = _scaled(group["base_lr"], step, warmup_steps, total_steps, shape, min_ratio, warmup_from_zero)
            lrs.append(group["lr"])
    return lrs


def _scaled(base_lr: float, step: int, warmup_steps: int, total_steps: int, shape: str, min_ratio: float,
            warmup_from_zero: bool) -> float:
    """``base_lr`` times the factor, rounded in warm-up as ``base_lr * k / warmup_steps`` (the order HRM's and the
    toy's own schedules multiplied in), so their runs keep the same lrs to the last bit; ``base_lr * (k / w)``
    differs in the last place at about a third of the warm-up steps."""
    if step < warmup_steps:
        return base_lr * (step if warmup_from_zero else step + 1) / warmup_steps
    return base_lr * lr_factor(step, warmup_steps, total_steps, shape, min_ratio, warmup_from_zero=warmup_from_zero)
