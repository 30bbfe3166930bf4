"""Evaluations of LM recipes: greedy pass@1 and sampled pass@k spread over every rank, each run logged and
written the same way, and paired before/after comparisons on the same problems."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np
import torch

from distlab.atomic import atomic_write_json

from distlab.recipes.lm.models import gathered
from distlab.recipes.lm.generate import generate
from distlab.recipes.lm.passk import bootstrap_ci, paired_comparison, pass_at_k_summary
from distlab.recipes.lm.prompting import prompt_text, stops_for
from distlab.recipes.lm.rewards import RewardScorer
from distlab.recipes.lm.settings import EvalConfig, SamplingConfig
from distlab.recipes.lm.tasks import Task
from distlab.wrap import unwrap

log = logging.getLogger("distlab")


def prompts_per_call(sampling: SamplingConfig, step_rows: int, n: int = 1) -> int:
    """Prompts per generate call in an evaluation of ``n`` samples per prompt.

    ``sampling.chunk_prompts`` when set; else as many as make ``step_rows`` rows, the rows of one training step's
    rollout on this rank. An evaluation call then holds as many rows as a training step's rollout, the rows the
    memory estimate counts: all 500 MBPP test prompts in one call took 45-93 GiB for a 135M model on an H200 and ran an
    H100 out of memory with Qwen-0.5B (2026-11-26).
    """
    return sampling.chunk_prompts or max(1, step_rows // max(n, 1))


def _scores(model, tok, tasks: list[Task], prompts: list[str], sampling: SamplingConfig, scorer: RewardScorer,
            n: int, temperature: float, seed: int, step_rows: int,
            on_chunk: Callable[[int], None] | None = None) -> np.ndarray:
    """[len(tasks), n] of 0/1 rewards; ``on_chunk(k)`` after each generate call of k prompts (progress)."""
    if not tasks:
        return np.zeros((0, n))
    futures = []
    chunk = prompts_per_call(sampling, step_rows, n)
    stops = stops_for(tasks, scorer.mode)
    for start in range(0, len(tasks), chunk):
        comps = generate(model, tok, prompts[start:start + chunk], max_new_tokens=sampling.max_completion_length,
                         temperature=temperature, top_p=sampling.top_p if temperature > 0 else 1.0,
                         stop_strings=stops, seed=seed + start, n=n, backend=sampling.backend,
                         compact_rows=sampling.compact_rows)
        futures += [scorer.submit(tasks[start + c.prompt_index], c.text) for c in comps]
        if on_chunk is not None:
            on_chunk(len(prompts[start:start + chunk]))
    return np.array([f.result() for f in futures], dtype=np.float64).reshape(len(tasks), n)


def evaluate_pass_at_k(model, tok, tasks: list[Task], few_shot: list[Task], sampling: SamplingConfig,
                       ev: EvalConfig, scorer: RewardScorer, rt, seed: int, *, step_rows: int,
                       on_chunk: Callable[[int], None] | None = None) -> dict:
    """Metrics (identical on every rank) plus per-problem results (rank 0 writes them); ``on_chunk`` sees this
    rank's greedy progress. ``step_rows``: a training step's rollout rows on a rank (:func:`prompts_per_call`)."""
    mine = list(range(rt.rank, len(tasks), rt.world_size))
    local = [tasks[i] for i in mine]
    prompts = [prompt_text(t, tok, scorer.mode, few_shot) for t in local]
    inner = unwrap(model)
    with gathered(model), torch.no_grad():
        greedy = _scores(inner, tok, local, prompts, sampling, scorer, 1, 0.0, seed, step_rows, on_chunk)
        sampled = (_scores(inner, tok, local, prompts, sampling, scorer, ev.samples, ev.eval_temperature, seed + 1,
                           step_rows)
                   if ev.samples > 1 else None)
    rows = [{"task_id": tasks[i].task_id, "greedy": float(greedy[j, 0]),
             "c": int(sampled[j].sum()) if sampled is not None else None} for j, i in enumerate(mine)]
    every = [r for part in rt.all_gather_object(rows) for r in part]
    order = {t.task_id: i for i, t in enumerate(tasks)}
    every.sort(key=lambda r: order[r["task_id"]])
    g = np.array([r["greedy"] for r in every])
    ci = bootstrap_ci(g) if len(g) > 1 else None
    out = {"pass@1": float(g.mean()) if len(g) else 0.0, "n_problems": len(g),
           "pass@1_low": ci.low if ci else float("nan"), "pass@1_high": ci.high if ci else float("nan")}
    if sampled is not None or ev.samples > 1:
        ks = [int(k) for k in ev.ks.split(",") if k.strip()]
        n = np.full(len(every), ev.samples)
        c = np.array([r["c"] for r in every])
        for name, interval in pass_at_k_summary(n, c, ks).items():
            out[f"sampled_{name}"], out[f"sampled_{name}_low"], out[f"sampled_{name}_high"] = (
                interval.mean, interval.low, interval.high)
    return {"metrics": out, "per_problem": every}


def logged_evaluation(session, step: int, split: str, run: Callable[[], dict], describe: Callable[[dict], str]) -> dict:
    """``run()``'s metrics, timed and logged under ``split``; rank 0 also writes its per-problem rows atomically."""
    t0 = time.perf_counter()
    out = run()
    metrics = {**out["metrics"], "eval_s": time.perf_counter() - t0}
    session.metrics.log(step, metrics, split=split)
    if session.rt.is_main:
        atomic_write_json(session.run_dir / f"{split}_step{step:06d}_problems.json", out["per_problem"])
        log.info("%s @%d: %s", split, step, describe(metrics))
    return {"metrics": metrics, "per_problem": out["per_problem"]}


def paired_fields(before: list[float], after: list[float], names: dict[str, str]) -> dict:
    """A paired comparison of per-problem scores, as metrics: ``names`` maps a metric to a field of
    :class:`~distlab.recipes.lm.passk.PairedComparison` (``diff``, ``low``, ``high``, ``significant``...)."""
    cmp = paired_comparison(before, after)
    return {metric: getattr(cmp, attr) for metric, attr in names.items()}
