"""Settings checks every LM recipe makes before any process starts (a recipe adds its own on top)."""

from __future__ import annotations

from typing import Any

from distlab.errors import DistlabError
from distlab.recipes.lm.model_source import resolve_source
from distlab.recipes.lm.settings import check_checkpointing
from distlab.recipes.lm.task_sets import check_task_data


def check_groups(cfg: Any, world_size: int) -> None:
    """Groups of completions that can carry a signal and prompts that split evenly over the ranks."""
    if cfg.num_generations < 2:
        raise DistlabError(f"num_generations={cfg.num_generations}: a group of one has no baseline, so every "
                           f"advantage is 0; use 2 or more")
    if cfg.prompts_per_step % world_size:
        raise DistlabError(f"prompts_per_step={cfg.prompts_per_step} does not split over {world_size} ranks; use a "
                           f"multiple of {world_size}")
    if not 0 < cfg.epsilon < 1:
        raise DistlabError(f"epsilon={cfg.epsilon} must lie in (0, 1): it is the ratio clip, 0.2 is usual")


def check_kl(kl: str, weights: dict[str, float]) -> None:
    """``k1`` (-log ratio) estimates the KL without bias, but as a loss term its gradient is zero in expectation:
    E over samples of the policy of grad log pi is 0, so it would pull nothing back towards the reference."""
    weighted = {k: v for k, v in weights.items() if v > 0}
    if str(kl) == "k1" and weighted:
        keys = ", ".join(f"{k}={v}" for k, v in weighted.items())
        raise DistlabError(f"kl=k1 as a loss term ({keys}) has zero expected gradient, so it does not hold the "
                           f"policy near the reference; use kl=k3 (the default) or kl=k2, or set the weight to 0 "
                           f"to only measure the KL")


def check_sources(cfg: Any, *extra_sources: str) -> None:
    """Models, task data and recomputation settings that would fail inside every rank, named here instead."""
    for source in (cfg.model.source, *[s for s in extra_sources if s]):
        resolve_source(source)
    check_task_data(cfg.task)
    check_checkpointing(cfg)
