"""Evaluations of LM recipes: greedy pass@1 and sampled pass@k spread over every rank, each run logged and
written the same way, and paired before/after comparisons on the same problems."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch

from distlab.atomic import atomic_write_json
from distlab.run.logs import Progress
from distlab.training.session import StopRequested, stop_requested

from distlab.recipes.lm.config import EvalConfig, SamplingConfig
from distlab.recipes.lm.eval.passk import bootstrap_ci, paired_comparison, pass_at_k_summary
from distlab.recipes.lm.harnesses import HarnessPlan
from distlab.recipes.lm.models.placed import gathered
from distlab.recipes.lm.rewards.scorer import RewardScorer
from distlab.recipes.lm.rollout.generate import generate
from distlab.recipes.lm.tasks import Task
from distlab.recipes.lm.tasks.prompts import prompt_text, stops_for
from distlab.training.wrap import unwrap

log = logging.getLogger("distlab")


def prompts_per_call(sampling: SamplingConfig, step_rows: int, n: int = 1) -> int:
    """Prompts per generate call in an evaluation of ``n`` samples per prompt.

    ``sampling.chunk_prompts`` when set; else as many as make ``step_rows`` rows, the rows of one training step's
    rollout on this rank. An evaluation call then holds as many rows as a training step's rollout, the rows the
    memory estimate counts: all 500 MBPP test prompts in one call took 45-93 GiB for a 135M model on an H200 and ran an
    H100 out of memory with Qwen-0.5B (2026-11-26).
    """
    return sampling.chunk_prompts or max(1, step_rows // max(n, 1))


def harness_plan(harness: str, tasks: list[Task], tok, scorer: RewardScorer, few_shot: list[Task]) -> HarnessPlan:
    """The prompts, stops and judging of ``evaluation.harness`` for ``tasks`` (:mod:`~distlab.recipes.lm.harnesses`):
    ``distlab`` is training's own; ``evalplus`` is zero-shot, so ``few_shot`` is for ``distlab`` only."""
    if harness == "evalplus":
        from distlab.recipes.lm.harnesses.evalplus import evalplus_plan

        return evalplus_plan(tasks, tok, scorer)
    return HarnessPlan([prompt_text(t, tok, scorer.mode, few_shot) for t in tasks], stops_for(tasks, scorer.mode),
                       scorer.submit)


def _scores(model, tok, tasks: list[Task], plan: HarnessPlan, sampling: SamplingConfig, n: int, temperature: float,
            seed: int, step_rows: int, progress: Progress | None = None) -> tuple[np.ndarray, list[str]] | None:
    """``([len(tasks), n] of 0/1 rewards, the completions prompt-major)``, with ``progress`` advanced by each generate
    call's prompts; None when a stop signal arrived first (the programs still queued for the sandbox are dropped),
    so that Ctrl-C waits for one generate call, not for the whole evaluation."""
    if not tasks:
        return np.zeros((0, n)), []
    futures, texts = [], []
    chunk = prompts_per_call(sampling, step_rows, n)
    prompts = plan.prompts
    for start in range(0, len(tasks), chunk):
        if stop_requested():
            for f in futures:
                f.cancel()
            return None
        comps = generate(model, tok, prompts[start:start + chunk], replace(sampling, temperature=temperature),
                         stop_strings=plan.stops, seed=seed + start, n=n)
        futures += [plan.submit(tasks[start + c.prompt_index], c.text) for c in comps]
        texts += [c.text for c in comps]
        if progress is not None:
            progress.advance(len(prompts[start:start + chunk]))
    return np.array([f.result() for f in futures], dtype=np.float64).reshape(len(tasks), n), texts


def kept_completions(greedy: list[str], greedy_rewards: np.ndarray, sampled: list[str] | None,
                     sampled_rewards: np.ndarray | None, keep: int) -> list[dict]:
    """The first ``keep`` completions of one problem, greedy first, with their rewards: what an evaluation file
    holds so that a person can read what the model wrote, not only whether it passed."""
    out = [{"kind": "greedy", "text": greedy[0], "reward": float(greedy_rewards[0])}] if greedy else []
    for text, reward in zip(sampled or [], sampled_rewards if sampled_rewards is not None else []):
        out.append({"kind": "sample", "text": text, "reward": float(reward)})
    return out[:max(keep, 0)]


def gathered_rows(rt, rows: list[dict], stopped: bool, tasks: list[Task]) -> list[dict]:
    """Every rank's per-problem rows, in the order of ``tasks``. Raises :class:`StopRequested` on every rank when a
    stop signal cut any rank's share short: all ranks reach this one collective either way, so they agree."""
    parts = rt.all_gather_object((rows, stopped))
    if any(cut for _, cut in parts):
        raise StopRequested("a stop signal arrived during the evaluation")
    every = [r for part, _ in parts for r in part]
    order = {t.task_id: i for i, t in enumerate(tasks)}
    every.sort(key=lambda r: order[r["task_id"]])
    return every


def evaluate_pass_at_k(model, tok, tasks: list[Task], few_shot: list[Task], sampling: SamplingConfig,
                       ev: EvalConfig, scorer: RewardScorer, rt, seed: int, *, step_rows: int,
                       progress: Callable[[str, int], Progress] | None = None) -> dict:
    """Metrics (identical on every rank) plus per-problem results (rank 0 writes them), each with its first
    ``evaluation.completions`` completions. ``step_rows``: a training step's rollout rows on a rank
    (:func:`prompts_per_call`). ``progress(label, total)`` opens the progress of each pass over this rank's problems
    (greedy, then sampled). A stop signal ends it early with :class:`StopRequested` on every rank."""
    mine = list(range(rt.rank, len(tasks), rt.world_size))
    local = [tasks[i] for i in mine]
    plan = harness_plan(ev.harness, local, tok, scorer, few_shot)
    inner = unwrap(model)
    opened = progress or (lambda label, total: Progress(total, enabled=False))
    with gathered(model), torch.no_grad():
        with opened("greedy", len(local)) as bar:
            greedy = _scores(inner, tok, local, plan, sampling, 1, 0.0, seed, step_rows, bar)
        sampled = None
        if ev.samples > 1 and greedy is not None:
            with opened(f"{ev.samples} samples each", len(local)) as bar:
                sampled = _scores(inner, tok, local, plan, sampling, ev.samples, ev.eval_temperature, seed + 1,
                                  step_rows, bar)
    stopped = greedy is None or (ev.samples > 1 and sampled is None)
    rows = [] if stopped else _rows(tasks, mine, greedy, sampled, ev)
    every = gathered_rows(rt, rows, stopped, tasks)
    g = np.array([r["greedy"] for r in every])
    ci = bootstrap_ci(g, outcomes=True) if len(g) > 1 else None
    out = {"pass@1": float(g.mean()) if len(g) else 0.0, "n_problems": len(g),
           "pass@1_low": ci.low if ci else float("nan"), "pass@1_high": ci.high if ci else float("nan")}
    if ev.samples > 1:
        ks = [int(k) for k in ev.ks.split(",") if k.strip()]
        n = np.full(len(every), ev.samples)
        c = np.array([r["c"] for r in every])
        for name, interval in pass_at_k_summary(n, c, ks).items():
            out[f"sampled_{name}"], out[f"sampled_{name}_low"], out[f"sampled_{name}_high"] = (
                interval.mean, interval.low, interval.high)
    return {"metrics": out, "per_problem": every}


def _rows(tasks: list[Task], mine: list[int], greedy: tuple[np.ndarray, list[str]],
          sampled: tuple[np.ndarray, list[str]] | None, ev: EvalConfig) -> list[dict]:
    """This rank's per-problem rows: greedy reward, sampled successes ``c``, the kept completions."""
    rows = []
    for j, i in enumerate(mine):
        s_rewards = sampled[0][j] if sampled is not None else None
        s_texts = sampled[1][j * ev.samples:(j + 1) * ev.samples] if sampled is not None else None
        row = {"task_id": tasks[i].task_id, "greedy": float(greedy[0][j, 0]),
               "c": int(s_rewards.sum()) if s_rewards is not None else None}
        if ev.completions > 0:
            row["completions"] = kept_completions(greedy[1][j:j + 1], greedy[0][j], s_texts, s_rewards,
                                                  ev.completions)
        rows.append(row)
    return rows


def logged_evaluation(session, step: int, split: str, run: Callable[[Callable[[str, int], Progress]], dict],
                      describe: Callable[[dict], str]) -> dict:
    """``run(progress)``'s metrics, timed and logged under ``split``; rank 0 also writes its per-problem rows
    atomically. ``progress(label, total)`` opens a phase named ``<split> <label>`` counting problems, so a long
    evaluation shows its count, rate and ETA. A stop signal raises :class:`StopRequested` out of ``run`` (nothing
    is logged or written for a cut evaluation)."""
    t0 = time.perf_counter()
    out = run(lambda label, total: session.phase(f"{split} {label}", total, "problem"))
    metrics = {**out["metrics"], "eval_s": time.perf_counter() - t0}
    session.metrics.log(step, metrics, split=split)
    if session.rt.is_main:
        atomic_write_json(session.run_dir / f"{split}_step{step:06d}_problems.json", out["per_problem"])
        log.info("%s @%d: %s", split, step, describe(metrics))
    return {"metrics": metrics, "per_problem": out["per_problem"]}


def paired_fields(before: list[float], after: list[float], names: dict[str, str]) -> dict:
    """A paired comparison of per-problem scores, as metrics: ``names`` maps a metric to a field of
    :class:`~distlab.recipes.lm.eval.passk.PairedComparison` (``diff``, ``low``, ``high``, ``significant``...)."""
    cmp = paired_comparison(before, after)
    return {metric: getattr(cmp, attr) for metric, attr in names.items()}
