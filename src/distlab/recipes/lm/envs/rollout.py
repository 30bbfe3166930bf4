"""Playing a batch of episodes: every live episode's next reply sampled in one call, then every environment's step.

Turn 0 samples from the environments' first prompts (texts, tokenised by :func:`~distlab.recipes.lm.rollout.generate.generate`);
later turns sample from each episode's token ids as they stand, so nothing the policy sampled is re-tokenised. Each
call samples with its own seed (``seed + turn * TURN_SEED``), so an episode's turns never share a random stream and a
run with the same seed plays the same episodes. Episodes that are done leave the batch; the rest get their
observation appended, masked out of training (:class:`~.trajectory.Trajectory`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from distlab.recipes.lm.config import SamplingConfig
from distlab.recipes.lm.envs.api import Env
from distlab.recipes.lm.envs.trajectory import Trajectory
from distlab.recipes.lm.models.placed import gathered
from distlab.recipes.lm.rollout.generate import generate
from distlab.recipes.lm.rollout.stops import Completion, decode
from distlab.run.logs import Progress

TURN_SEED = 2_000_003  # turn t samples with seed + t * TURN_SEED (SCoRe's turn-2 offset before it played envs)
Ticks = Callable[[int], Callable[[int], None]]  # ticks(width): generate's on_step for a call of width tokens


def progress_ticks(bar: Progress | None, width: int) -> Callable[[int], None]:
    """``generate``'s ``on_step`` for a call of ``width`` tokens starting where ``bar`` stands; called with ``width``
    after the call, it moves ``bar`` to the call's end (completions that all stopped early end a call early)."""
    if bar is None:
        return lambda k: None
    start = bar.done
    return lambda k: bar.update(start + min(k, width))


@dataclass(frozen=True)
class Sampler:
    """How each turn is sampled: the weights generation reads, the tokenizer and the run's ``sampling`` settings
    (``max_completion_length`` tokens per reply), the same every turn. ``gather``: the module whose FSDP2
    parameters are gathered around each call (the trained one). ``max_prompt_length`` and ``batch_rows`` fix the
    compiled cache's shape for every turn: size them for the longest episode a turn can be sampled after."""

    model: nn.Module
    tokenizer: Any
    sampling: SamplingConfig
    max_prompt_length: int | None = None
    batch_rows: int | None = None
    gather: nn.Module | None = None

    def sample(self, prompts: Sequence[str] | Sequence[Sequence[int]], seed: int, stops: Sequence[str],
               on_step: Callable[[int], None] | None) -> list[Completion]:
        """One reply per prompt (texts on turn 0, token ids after)."""
        with gathered(self.gather if self.gather is not None else self.model), torch.no_grad():
            return generate(self.model, self.tokenizer, list(prompts), self.sampling, seed=seed, stop_strings=stops,
                            max_prompt_length=self.max_prompt_length, batch_rows=self.batch_rows, on_step=on_step)


def play(sampler: Sampler, envs: Sequence[Env], *, seed: int, pool: Executor, ticks: Ticks | None = None,
         max_observation_tokens: int | None = None) -> list[Trajectory]:
    """One :class:`Trajectory` per environment (in order), each played until its environment says done or its
    ``max_turns`` replies are in. ``ticks`` shows each call's decoding (a progress bar's hook); observations longer
    than ``max_observation_tokens`` lose their middle. Rewards may still be futures (see :class:`~.api.Step`)."""
    if not envs:
        return []
    kinds = {type(env) for env in envs}
    if len(kinds) > 1:
        raise ValueError(f"one batch plays one kind of environment, got {sorted(k.__name__ for k in kinds)}")
    kind = kinds.pop()
    prompts = [env.reset() for env in envs]
    trajectories: list[Trajectory | None] = [None] * len(envs)
    live = list(range(len(envs)))
    turn, width = 0, sampler.sampling.max_completion_length
    while live:
        stops = tuple(sorted({s for i in live for s in envs[i].stop_strings}))
        tick = ticks(width) if ticks is not None else None
        if turn == 0:
            replies = sampler.sample([prompts[i] for i in live], seed, stops, tick)
            for i, reply in zip(live, replies):
                trajectories[i] = Trajectory.start(i, reply.prompt_ids)
        else:
            replies = sampler.sample([trajectories[i].ids for i in live], seed + turn * TURN_SEED, stops, tick)
        if tick is not None:
            tick(width)  # a call whose replies all stopped early is whole
        for i, reply in zip(live, replies):
            trajectories[i].add_reply(reply, envs[i].reply_role(turn), decode(sampler.tokenizer, reply.token_ids))
        steps = kind.step_all([envs[i] for i in live], replies, pool)
        going = []
        for i, step in zip(live, steps):
            t = trajectories[i]
            t.rewards.append(step.reward)
            t.add_info(step.info)
            if not step.done and t.turns < envs[i].max_turns:
                t.add_observation(sampler.tokenizer, step.observation, max_observation_tokens)
                going.append(i)
        live, turn = going, turn + 1
    return trajectories
