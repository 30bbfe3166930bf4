"""``distlab eval RUN`` for GRPO runs: greedy pass@1 (and pass@k) of the checkpoint and of the base model."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import torch

from distlab.recipes.grpo.config import GRPOConfig
from distlab.recipes.lm.eval.evaluation import evaluate_pass_at_k, paired_fields
from distlab.recipes.lm.models.placed import SamplingCopy, load_placed
from distlab.recipes.lm.rewards.scorer import RewardScorer
from distlab.recipes.lm.tasks.select import eval_tasks, train_tasks
from distlab.training.loop import skipped_fields
from distlab.training.placement import DTYPES


def evaluate_checkpoint(cfg: GRPOConfig, session, ckpt: Path) -> dict:
    """Scores the trained policy and the base model on the same problems; ``task.eval=...`` picks the set."""
    rt = session.rt
    tasks = eval_tasks(cfg.task)
    few_shot = train_tasks(cfg.task)[: cfg.task.few_shot] if cfg.task.few_shot else []
    scorer = RewardScorer(cfg.sandbox, cfg.model.prompt_mode, rt.local_world_size)
    base, tok = load_placed("policy", cfg, session, cfg.run.seed)
    opt = torch.optim.AdamW([p for p in base.parameters() if p.requires_grad], lr=cfg.lr)
    sampling = SamplingCopy(base, DTYPES[cfg.models["policy"].dtype])
    score = partial(evaluate_pass_at_k, sampling.module, tok, tasks, few_shot, cfg.sampling, cfg.evaluation, scorer,
                    rt, cfg.run.seed + 31, step_rows=cfg.rows_per_rank(rt.world_size))
    before = score(progress=lambda label, total: session.phase(f"base {label}", total, "problem"))
    session.track_model("policy", base, [opt])
    meta = session.load_checkpoint(ckpt)
    sampling.refresh()
    after = score(progress=lambda label, total: session.phase(f"step {meta['step']} {label}", total, "problem"))
    scorer.close()
    out = {"step": meta["step"], **skipped_fields(meta), "tasks": f"{cfg.task.eval}/{cfg.task.eval_split}",
           "harness": str(cfg.evaluation.harness), **after["metrics"],
           **{f"base_{k}": v for k, v in before["metrics"].items()}}
    if len(tasks) > 1:
        out.update(paired_fields([r["greedy"] for r in before["per_problem"]], [r["greedy"] for r in after["per_problem"]],
                                 {"delta_pass@1": "diff", "delta_low": "low", "delta_high": "high",
                                  "delta_significant": "significant", "mcnemar_p": "mcnemar_p",
                                  "delta_fixed": "candidate_only", "delta_broken": "baseline_only"}))
    if rt.is_main:
        from distlab.atomic import atomic_write_json

        atomic_write_json(session.run_dir / "problems.json", {"before": before["per_problem"],
                                                               "after": after["per_problem"]})
    return out
