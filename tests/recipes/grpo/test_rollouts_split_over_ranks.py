"""GRPO across ranks: each rank takes a disjoint share of the step's prompts (together exactly the prompts one
process takes) and samples them from its own seed, so no two ranks draw the same completions."""

from __future__ import annotations

import itertools

from distlab.recipes.lm.rollout.seeds import rollout_seed
from distlab.runtime.sampler import GlobalBatchSampler


def _prompts(world: int, steps: int, tasks: int = 50, per_step: int = 8, seed: int = 3) -> list[list[set[int]]]:
    """Per step, the prompt indices of each rank as GRPO's trainer draws them."""
    samplers = [GlobalBatchSampler(tasks, per_step, r, world, seed) for r in range(world)]
    return [[set(s.next().tolist()) for s in samplers] for _ in range(steps)]


def test_ranks_split_the_one_process_prompts_without_overlap() -> None:
    one = _prompts(1, 20)
    for world in (2, 4):
        for step, (alone, shares) in enumerate(zip(one, _prompts(world, 20))):
            assert all(len(s) == 8 // world for s in shares), step
            assert set().union(*shares) == alone[0], step  # the same prompts as one process, step by step
            assert all(not (a & b) for a, b in itertools.combinations(shares, 2)), step


def test_every_rank_and_step_samples_from_its_own_seed() -> None:
    seeds = [rollout_seed(7, step, rank) for step in range(2_000) for rank in range(8)]
    assert len(set(seeds)) == len(seeds)
    assert rollout_seed(7, 5, 1) == rollout_seed(7, 5, 1)  # a resumed run draws the same completions
    assert rollout_seed(7, 5, 1) != rollout_seed(8, 5, 1)
