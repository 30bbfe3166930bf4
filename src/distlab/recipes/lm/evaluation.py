"""Greedy pass@1 and sampled pass@k of a model on a task set, spread over every rank, with intervals."""

from __future__ import annotations

import numpy as np
import torch

from distlab.recipes.lm.build import gathered, prompt_text, stops_for
from distlab.recipes.lm.generate import generate
from distlab.recipes.lm.passk import bootstrap_ci, pass_at_k_summary
from distlab.recipes.lm.rewards import RewardScorer
from distlab.recipes.lm.settings import EvalConfig, SamplingConfig
from distlab.recipes.lm.tasks import Task
from distlab.wrap import unwrap


def _scores(model, tok, tasks: list[Task], prompts: list[str], sampling: SamplingConfig, scorer: RewardScorer,
            n: int, temperature: float, seed: int) -> np.ndarray:
    """[len(tasks), n] of 0/1 rewards."""
    if not tasks:
        return np.zeros((0, n))
    futures = []
    chunk = sampling.chunk_prompts or len(tasks)
    stops = stops_for(tasks, scorer.mode)
    for start in range(0, len(tasks), chunk):
        comps = generate(model, tok, prompts[start:start + chunk], max_new_tokens=sampling.max_completion_length,
                         temperature=temperature, top_p=sampling.top_p if temperature > 0 else 1.0,
                         stop_strings=stops, seed=seed + start, n=n, backend=sampling.backend)
        futures += [scorer.submit(tasks[start + c.prompt_index], c.text) for c in comps]
    return np.array([f.result() for f in futures], dtype=np.float64).reshape(len(tasks), n)


def evaluate_pass_at_k(model, tok, tasks: list[Task], few_shot: list[Task], sampling: SamplingConfig,
                       ev: EvalConfig, scorer: RewardScorer, rt, seed: int) -> dict:
    """Metrics (identical on every rank) plus per-problem results (rank 0 writes them)."""
    mine = list(range(rt.rank, len(tasks), rt.world_size))
    local = [tasks[i] for i in mine]
    prompts = [prompt_text(t, tok, scorer.mode, few_shot) for t in local]
    inner = unwrap(model)
    with gathered(model), torch.no_grad():
        greedy = _scores(inner, tok, local, prompts, sampling, scorer, 1, 0.0, seed)
        sampled = (_scores(inner, tok, local, prompts, sampling, scorer, ev.samples, ev.eval_temperature, seed + 1)
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
