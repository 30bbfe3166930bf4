"""GRPO on multi-turn episodes (``env.name``): G episodes per prompt, each played in an environment of ``lm/envs``.

An episode takes the place of a completion: its return (the sum of its turns' rewards) is the ``tests`` reward, the
other reward functions read its last reply, and the update trains on the policy's tokens of every turn
(:class:`~distlab.recipes.lm.envs.trajectory.Trajectory`'s mask; what the environment said is never trained on and
carries no KL). The advantages stay per episode: each of its turns is credited with the episode's return.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from distlab.recipes.lm.envs.api import done_future
from distlab.recipes.lm.envs.context import EnvContext
from distlab.recipes.lm.envs.registry import env_factory
from distlab.recipes.lm.envs.rollout import Sampler, play, progress_ticks
from distlab.recipes.lm.envs.trajectory import Trajectory
from distlab.recipes.lm.eval.evaluation import gathered_rows, paired_fields
from distlab.recipes.lm.eval.passk import bootstrap_ci
from distlab.recipes.lm.rewards.functions import Sample
from distlab.recipes.lm.rollout.generate import max_prompt_tokens
from distlab.recipes.lm.tasks import Task
from distlab.recipes.lm.tasks.prompts import prompt_text
from distlab.run.logs import Progress


def env_context(cfg, parts) -> EnvContext:
    return EnvContext(parts.tok, cfg.model.prompt_mode, parts.few_shot, parts.scorer, cfg.env)


def first_prompts(cfg, tok, tasks: list[Task], few_shot: list[Task], scorer=None) -> list[str]:
    """Each task's first prompt: the environment's (``env.name``), else the task's own."""
    if not cfg.env.name:
        return [prompt_text(t, tok, cfg.model.prompt_mode, few_shot) for t in tasks]
    ctx = EnvContext(tok, cfg.model.prompt_mode, few_shot, scorer, cfg.env)
    return [env_factory(cfg.env.name)(t, ctx).reset() for t in tasks]


def prompt_bound(cfg, tok, tasks: list[Task], few_shot: list[Task]) -> int:
    """The longest prompt a turn is sampled after, in tokens: the task set's longest first prompt, plus, with an
    environment, every earlier turn's reply and answer at their limits. Sizes the one compiled decode cache."""
    first = max_prompt_tokens(tok, first_prompts(cfg, tok, tasks, few_shot))
    if not cfg.env.name:
        return first
    return first + (cfg.env.max_turns - 1) * (cfg.sampling.max_completion_length + cfg.env.max_observation_tokens)


def policy_tokens(cfg) -> int:
    """The most tokens the policy samples in one episode (``dr_grpo`` divides by it)."""
    return cfg.sampling.max_completion_length * (cfg.env.max_turns if cfg.env.name else 1)


def env_rollout(cfg, parts, tasks: list[Task], prompts: list[str], seed: int,
                bar_of: Callable[[int], Progress]) -> tuple[list[Trajectory], list[dict[str, Future | float]]]:
    """G episodes per task (prompt-major), ``sampling.chunk_prompts`` tasks per batch; returns the trajectories
    and each one's started rewards. ``bar_of(total)`` opens the rollout's progress bar (decode steps)."""
    chunk = cfg.sampling.chunk_prompts or len(tasks)
    g = cfg.num_generations
    make, ctx = env_factory(cfg.env.name), env_context(cfg, parts)
    sampler = Sampler(parts.sampling.module, parts.tok, cfg.sampling, max_prompt_length=parts.max_prompt_length,
                      batch_rows=chunk * g, gather=parts.policy)
    episodes: list[Trajectory] = []
    started: list[dict[str, Future | float]] = []
    calls = -(-len(tasks) // chunk) * cfg.env.max_turns
    with bar_of(calls * cfg.sampling.max_completion_length) as bar:
        for start in range(0, len(tasks), chunk):
            envs = [make(task, ctx) for task in tasks[start:start + chunk] for _ in range(g)]
            played = play(sampler, envs, seed=seed + start, pool=parts.scorer.pool,
                          ticks=lambda width: progress_ticks(bar, width),
                          max_observation_tokens=cfg.env.max_observation_tokens)
            for i, t in enumerate(played):
                t.prompt_index = start + i // g
                started.append(_rewards(parts, tasks[t.prompt_index], prompts[t.prompt_index], t))
            episodes += played
    return episodes, started


def _rewards(parts, task: Task, prompt: str, t: Trajectory) -> dict[str, Future | float]:
    """Every configured reward of one episode: ``tests`` is its return, the others read its last reply."""
    t.resolve()
    last = t.replies[-1]
    sample = Sample(task, prompt, last.text, len(last.token_ids), last.truncated)
    return parts.rewards.submit(sample, lambda: done_future(t.total_reward))


def env_sums(episodes: list[Any]) -> dict[str, float]:
    """This rank's sums over its episodes, to all-reduce: turns, policy and environment tokens, and what the
    environments reported (``info``: passes at each turn, tool calls...)."""
    out = {"env/episodes": float(len(episodes)), "env/turns": 0.0, "env/policy_tokens": 0.0, "env/env_tokens": 0.0,
           "env/cut_tokens": 0.0}
    for t in episodes:
        out["env/turns"] += t.turns
        out["env/policy_tokens"] += sum(t.mask)
        out["env/env_tokens"] += len(t.mask) - sum(t.mask)
        out["env/cut_tokens"] += t.cut_tokens
        for key, value in t.info.items():
            out[f"env/{key}"] = out.get(f"env/{key}", 0.0) + value
    return out


def env_metrics(rt, episodes: list[Any]) -> dict[str, float]:
    """Per-episode means over every rank's episodes (the info keys an environment reported on any rank)."""
    local = env_sums(episodes)
    keys = sorted({k for sums in rt.all_gather_object(sorted(local)) for k in sums})
    tot = rt.reduce_sums({k: local.get(k, 0.0) for k in keys})
    n = max(tot.pop("env/episodes"), 1.0)
    return {k: v / n for k, v in tot.items()}


def evaluate_episodes(cfg, model, tok, tasks: list[Task], few_shot: list[Task], scorer, rt, seed: int,
                      progress: Callable[[str, int], Progress]) -> dict:
    """One greedy episode per held-out task in the environment, this rank's share of them (``sampling.chunk_prompts``
    or a training step's rows per batch); every rank's rows gathered. Metrics (identical on every rank): the mean
    return with its interval, the turns taken, and the return of the first reply alone (the episode as if it had
    ended there: its first reply's reward) with the paired gain of the later turns on the same problems."""
    mine = [tasks[i] for i in range(rt.rank, len(tasks), rt.world_size)]
    chunk = cfg.sampling.chunk_prompts or max(1, cfg.rows_per_rank(rt.world_size))
    ctx = EnvContext(tok, cfg.model.prompt_mode, few_shot, scorer, cfg.env)
    sampler = Sampler(model, tok, replace(cfg.sampling, temperature=0.0))
    rows = []
    with progress("episodes", len(mine)) as bar:
        for start in range(0, len(mine), chunk):
            batch = mine[start:start + chunk]
            played = play(sampler, [env_factory(cfg.env.name)(t, ctx) for t in batch], seed=seed, pool=scorer.pool,
                          max_observation_tokens=cfg.env.max_observation_tokens)
            for task, t in zip(batch, played):
                t.resolve()
                rows.append({"task_id": task.task_id, "episode_return": t.total_reward, "turns": t.turns,
                             "first_turn_return": t.rewards[0]})
            bar.update(start + len(batch))
    every = gathered_rows(rt, rows, False, tasks)
    ret = [r["episode_return"] for r in every]
    ci = bootstrap_ci(ret) if len(ret) > 1 else None
    out = {"env_return": sum(ret) / max(len(ret), 1), "env_return_low": ci.low if ci else float("nan"),
           "env_return_high": ci.high if ci else float("nan"),
           "env_turns": sum(r["turns"] for r in every) / max(len(every), 1)}
    if len(every) > 1:
        out |= paired_fields([r["first_turn_return"] for r in every], ret,
                             {"env_first_turn_return": "mean_baseline", "env_later_turns_gain": "diff",
                              "env_later_turns_gain_low": "low", "env_later_turns_gain_high": "high"})
    return {"metrics": out, "per_problem": every}
