"""Playing episodes: turn 1, an optional hint, turn 2 (and turn 2 again without the hint), all scored.

The two turns are one environment of ``lm/envs`` (:class:`~.env.SelfCorrection`), played by its driver as GRPO's
multi-turn episodes are; the guidance's hints and the evaluation's turn 2 without the hint are this module's.
The same code serves training (G sampled turn-1 attempts per prompt) and evaluation (one greedy
episode per problem), so the metrics of the two are computed on identical episodes.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import torch
from torch import nn

from distlab.recipes.lm.envs.api import resolved
from distlab.recipes.lm.envs.rollout import Sampler, progress_ticks
from distlab.recipes.lm.envs.rollout import play as play_episodes
from distlab.recipes.lm.envs.trajectory import encode_pieces
from distlab.recipes.lm.models.placed import gathered
from distlab.recipes.lm.rewards.scorer import RewardScorer
from distlab.recipes.lm.rollout.generate import generate
from distlab.recipes.lm.tasks import Task
from distlab.recipes.lm.tasks.prompts import build_program, is_math, prompt_text, stops_for
from distlab.recipes.score.env import SelfCorrection, SelfCorrectionSetup, take_turn1
from distlab.recipes.score.episode import Episode, execution_feedback, guidance_prompt, turn2_pieces
from distlab.run.logs import Progress
from distlab.training.wrap import unwrap

SEED_HINT, SEED_NO_HINT = 1_000_003, 3_000_017  # turn 2: the driver's seed + TURN_SEED


@dataclass(frozen=True)
class CacheShapes:
    """The fixed KV-cache shape of a run's training rollouts (``generate``'s ``max_prompt_length`` and
    ``batch_rows``), so that each model's compiled decode step is captured once: the policy's turn-1 and turn-2
    calls share one shape sized for the longer turn-2 prompt, the guidance model has its own. None: each call's
    own shape (evaluation, the dynamic-cache path)."""

    policy_prompt: int | None = None
    guidance_prompt: int | None = None
    rows: int | None = None


@dataclass
class Players:
    """The models an episode needs, already placed; ``guidance`` is None for plain SCoRe."""

    policy: nn.Module
    tok: Any
    mode: str
    guidance: nn.Module | None = None
    gtok: Any = None
    guide_mode: str = "text"
    shapes: CacheShapes = CacheShapes()  # for training rollouts; evaluation passes its own chunks unfixed


def play(cfg, players: Players, tasks: list[Task], few_shot: list[Task], scorer: RewardScorer, *, n: int,
         temperature: float, hint_temperature: float, seed: int, no_hint: bool, fixed: bool = False,
         phase: Callable[[str, int, str], Progress] | None = None) -> list[Episode]:
    """``n`` episodes per task (prompt-major, so a prompt's G episodes are consecutive), rewards filled in;
    ``fixed``: decode on the run's fixed cache shapes (``players.shapes``), as training rollouts do. ``phase``
    (``Session.phase``) shows a long rollout's decode steps over all its turns, with rate and ETA."""
    if not tasks:
        return []
    if phase is None:
        return _play(cfg, players, tasks, few_shot, scorer, n, temperature, hint_temperature, seed, no_hint, fixed)
    turns = [cfg.sampling.max_completion_length] * (2 + int(no_hint and players.guidance is not None))
    with phase("rollout", sum(turns) + (cfg.hint_max_tokens if players.guidance is not None else 0), "token") as bar:
        return _play(cfg, players, tasks, few_shot, scorer, n, temperature, hint_temperature, seed, no_hint, fixed,
                     bar)


def _play(cfg, players: Players, tasks: list[Task], few_shot: list[Task], scorer: RewardScorer, n: int,
          temperature: float, hint_temperature: float, seed: int, no_hint: bool, fixed: bool,
          bar: Progress | None = None) -> list[Episode]:
    """The two turns played as one batch of :class:`~.env.SelfCorrection` episodes by the environments' driver,
    then (``no_hint``, with a guidance model) turn 2 sampled again without the hint, and every reward taken."""
    s = replace(cfg.sampling, temperature=temperature)
    shapes = players.shapes if fixed else CacheShapes()
    tok, mode = players.tok, players.mode
    prompts1 = [prompt_text(t, tok, mode, few_shot) for t in tasks]
    hints = None
    if players.guidance is not None:
        hints = partial(_hints, cfg, players, replace(s, temperature=hint_temperature,
                                                      max_completion_length=cfg.hint_max_tokens),
                        seed + SEED_HINT, shapes, bar)
    setup = SelfCorrectionSetup(cfg, tok, mode, few_shot, scorer, hints)
    envs = [SelfCorrection(task, i, prompts1[i], setup) for i, task in enumerate(tasks) for _ in range(n)]
    sampler = Sampler(unwrap(players.policy), tok, s, max_prompt_length=shapes.policy_prompt, batch_rows=shapes.rows,
                      gather=players.policy)
    played = play_episodes(sampler, envs, seed=seed, pool=scorer.pool, ticks=partial(progress_ticks, bar))
    episodes = [env.episode for env in envs]
    for ep, t in zip(episodes, played):
        ep.ids, ep.roles = t.ids, t.roles
    y2b = None
    if no_hint and players.guidance is not None:  # the hint's effect: turn 2 again on the same y1, no hint
        feedback = [execution_feedback(ep.task, ep.exec_status, ep.exec_tail) if cfg.policy_sees_execution else ""
                    for ep in episodes]
        bare = [t.prompt_ids + ep.y1.token_ids + encode_pieces(tok, turn2_pieces(
                    ep.task, tok, mode, prompts1[ep.group], ep.y1, "", cfg.instruction, few_shot, cfg.restate_problem,
                    fb))[0] for ep, t, fb in zip(episodes, played, feedback)]
        tick = progress_ticks(bar, s.max_completion_length)
        with gathered(players.policy), torch.no_grad():
            y2b = generate(unwrap(players.policy), tok, bare, s, stop_strings=stops_for(tasks, mode),
                           seed=seed + SEED_NO_HINT, on_step=tick)
        tick(s.max_completion_length)
    no_hint_f = [scorer.submit(ep.task, c.text) for ep, c in zip(episodes, y2b)] if y2b is not None else None
    if not setup.waits_for_turn1:
        take_turn1(envs, cfg.error_tail_chars)
    for i, (ep, t) in enumerate(zip(episodes, played)):
        ep.r2 = resolved(t.rewards[1])
        ep.kept = unchanged(ep.task, ep.y1.text, ep.y2.text, mode)
        ep.r2_no_hint = float(no_hint_f[i].result()) if no_hint_f is not None else None
    return episodes


def _hints(cfg, players: Players, sampling, seed: int, shapes: CacheShapes, bar: Progress | None,
           episodes: list[Episode]) -> None:
    """The guidance model's hint for every episode after its y1 (one batched call), with what it was asked."""
    gprompts = [guidance_prompt(ep.task, ep.y1.text, players.gtok, players.guide_mode,
                                (ep.exec_status, ep.exec_tail) if cfg.hint_sees_execution else None)
                for ep in episodes]
    with gathered(players.guidance), torch.no_grad():
        tick = progress_ticks(bar, cfg.hint_max_tokens)
        hints = generate(unwrap(players.guidance), players.gtok, gprompts, sampling,
                         stop_strings=("\n",) if players.guide_mode == "text" else (), seed=seed,
                         max_prompt_length=shapes.guidance_prompt, batch_rows=shapes.rows, on_step=tick)
        tick(cfg.hint_max_tokens)
    for ep, h in zip(episodes, hints):
        ep.hint, ep.hint_prompt_ids = h, list(h.prompt_ids)


def unchanged(task: Task, y1: str, y2: str, mode: str) -> bool:
    """Whether turn 2 wrote turn 1's answer again: the same program as the sandbox would run it, compared as syntax
    trees (prose, comments, blank lines and spacing are not a rewrite), or for a math task the same words. Two
    attempts without code are unchanged too. ``arm=selective`` reads this as turn 2's verdict "y1 is right"; every
    arm logs it (``keep_rate``)."""
    if is_math(task):
        return " ".join(y1.split()) == " ".join(y2.split())
    return _tree(build_program(task, y1, mode)) == _tree(build_program(task, y2, mode))


def _tree(code: str) -> str:
    try:
        return ast.dump(ast.parse(code))
    except (SyntaxError, ValueError):
        return code
