"""Playing episodes: turn 1, an optional hint, turn 2 (and turn 2 again without the hint), all scored.

The same code serves training (G sampled turn-1 attempts per prompt) and evaluation (one greedy
episode per problem), so the metrics of the two are computed on identical episodes.
"""

from __future__ import annotations

import ast
from concurrent.futures import Future
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from distlab.recipes.lm.models.placed import gathered
from distlab.recipes.lm.rewards.scorer import RewardScorer
from distlab.recipes.lm.rollout.generate import generate
from distlab.recipes.lm.tasks import Task
from distlab.recipes.lm.tasks.prompts import build_program, is_math, prompt_text, stops_for
from distlab.recipes.score.episode import (ROLE_PROMPT, ROLE_Y1, ROLE_Y2, Episode, execution_feedback,
                                           guidance_prompt, turn2_prompt)
from distlab.run.logs import Progress
from distlab.training.wrap import unwrap

SEED_HINT, SEED_TURN2, SEED_NO_HINT = 1_000_003, 2_000_003, 3_000_017


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


def _ticks(bar: Progress | None, width: int) -> Callable[[int], None]:
    """``generate``'s ``on_step`` for a call of ``width`` tokens starting where ``bar`` stands; called with ``width``
    after the call, it moves ``bar`` to the call's end (completions that all stopped early end a call early)."""
    if bar is None:
        return lambda k: None
    start = bar.done
    return lambda k: bar.update(start + min(k, width))


def _play(cfg, players: Players, tasks: list[Task], few_shot: list[Task], scorer: RewardScorer, n: int,
          temperature: float, hint_temperature: float, seed: int, no_hint: bool, fixed: bool,
          bar: Progress | None = None) -> list[Episode]:
    s = replace(cfg.sampling, temperature=temperature)
    shapes = players.shapes if fixed else CacheShapes()
    on_policy = dict(max_prompt_length=shapes.policy_prompt, batch_rows=shapes.rows)
    tok, mode = players.tok, players.mode
    prompts1 = [prompt_text(t, tok, mode, few_shot) for t in tasks]
    stops = stops_for(tasks, mode)
    inner = unwrap(players.policy)
    with gathered(players.policy), torch.no_grad():
        tick = _ticks(bar, s.max_completion_length)
        y1s = generate(inner, tok, prompts1, s, stop_strings=stops, seed=seed, n=n, on_step=tick, **on_policy)
        tick(s.max_completion_length)
    episodes = []
    for c in y1s:
        ep = Episode(task=tasks[c.prompt_index], group=c.prompt_index)
        ep.extend(c.prompt_ids, ROLE_PROMPT)
        ep.y1 = c
        ep.extend(c.token_ids, ROLE_Y1)
        episodes.append(ep)
    first = [scorer.submit_detailed(ep.task, ep.y1.text) for ep in episodes]
    # turn 1's test results are waited for before turn 2 only when a model must read them; otherwise the sandbox
    # runs them while turn 2 is generated
    early = cfg.policy_sees_execution or (cfg.hint_sees_execution and players.guidance is not None)
    if early:
        _take_turn1(episodes, first, cfg.error_tail_chars)
    if players.guidance is not None:
        gprompts = [guidance_prompt(ep.task, ep.y1.text, players.gtok, players.guide_mode,
                                    (ep.exec_status, ep.exec_tail) if cfg.hint_sees_execution else None)
                    for ep in episodes]
        with gathered(players.guidance), torch.no_grad():
            tick = _ticks(bar, cfg.hint_max_tokens)
            hints = generate(unwrap(players.guidance), players.gtok, gprompts,
                             replace(s, temperature=hint_temperature, max_completion_length=cfg.hint_max_tokens),
                             stop_strings=("\n",) if players.guide_mode == "text" else (), seed=seed + SEED_HINT,
                             max_prompt_length=shapes.guidance_prompt, batch_rows=shapes.rows, on_step=tick)
            tick(cfg.hint_max_tokens)
        for ep, h in zip(episodes, hints):
            ep.hint, ep.hint_prompt_ids = h, list(h.prompt_ids)
    feedback = [execution_feedback(ep.task, ep.exec_status, ep.exec_tail) if cfg.policy_sees_execution else ""
                for ep in episodes]
    with_hint = [turn2_prompt(ep, tok, mode, prompts1[ep.group], ep.hint_text, cfg.instruction, few_shot,
                              cfg.restate_problem, fb)
                 for ep, fb in zip(episodes, feedback)]
    bare = ([turn2_prompt(ep, tok, mode, prompts1[ep.group], "", cfg.instruction, few_shot,
                          cfg.restate_problem, fb) for ep, fb in zip(episodes, feedback)]
            if no_hint and players.guidance is not None else None)
    with gathered(players.policy), torch.no_grad():
        tick = _ticks(bar, s.max_completion_length)
        y2s = generate(inner, tok, [ids for ids, _ in with_hint], s, stop_strings=stops, seed=seed + SEED_TURN2,
                       on_step=tick, **on_policy)
        tick(s.max_completion_length)
        tick = _ticks(bar if bare is not None else None, s.max_completion_length)
        y2b = (generate(inner, tok, [ids for ids, _ in bare], s, stop_strings=stops, seed=seed + SEED_NO_HINT,
                        on_step=tick) if bare is not None else None)
        tick(s.max_completion_length)
    for ep, (ids, roles), c in zip(episodes, with_hint, y2s):
        ep.ids, ep.roles, ep.y2 = list(ids), list(roles), c
        ep.extend(c.token_ids, ROLE_Y2)
    second = [scorer.submit(ep.task, ep.y2.text) for ep in episodes]
    no_hint_f = [scorer.submit(ep.task, c.text) for ep, c in zip(episodes, y2b)] if y2b is not None else None
    if not early:
        _take_turn1(episodes, first, cfg.error_tail_chars)
    for i, ep in enumerate(episodes):
        ep.r2 = float(second[i].result())
        ep.kept = unchanged(ep.task, ep.y1.text, ep.y2.text, mode)
        ep.r2_no_hint = float(no_hint_f[i].result()) if no_hint_f is not None else None
    return episodes


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


def _take_turn1(episodes: list[Episode], futures: list[Future], tail_chars: int) -> None:
    for ep, f in zip(episodes, futures):
        r, status, tail = f.result()
        ep.r1, ep.exec_status, ep.exec_tail = float(r), status, tail[-tail_chars:] if tail_chars > 0 else ""
