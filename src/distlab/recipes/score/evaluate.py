"""Greedy self-correction metrics with 95% bootstrap intervals, and ``distlab eval RUN`` for score runs.

Evaluation is greedy, as in the SCoRe paper: one turn-1 attempt, one hint (greedy too) when there is a
guidance model, one turn 2, and one turn 2 without the hint on the same y1. Problems are spread over
ranks and gathered, so every rank returns the same metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from distlab.recipes.lm.eval.evaluation import gathered_rows, paired_fields, prompts_per_call
from distlab.recipes.lm.models.placed import SamplingCopy, load_placed
from distlab.recipes.lm.rewards.scorer import RewardScorer
from distlab.recipes.lm.tasks import Task
from distlab.recipes.lm.tasks.select import eval_tasks, train_tasks
from distlab.recipes.score import metrics as scm
from distlab.recipes.score.config import ScoreConfig, guidance_config
from distlab.recipes.score.episode import leaks_code
from distlab.recipes.score.rollout import Players, play
from distlab.run.logs import Progress
from distlab.training.loop import skipped_fields
from distlab.training.placement import DTYPES
from distlab.training.session import stop_requested


def feedback_label(cfg: ScoreConfig) -> str:
    """``extrinsic`` when turn 2 could know turn 1's test result: the policy read it (``policy_sees_execution``) or the
    guidance did (``hint_sees_execution``, the hint may reveal it); else ``intrinsic``."""
    guided = cfg.hint_sees_execution and cfg.guidance != "none"
    return "extrinsic" if guided or cfg.policy_sees_execution else "intrinsic"


def evaluate_self_correction(cfg: ScoreConfig, players: Players, tasks: list[Task], few_shot: list[Task],
                             scorer: RewardScorer, rt, seed: int,
                             progress: Callable[[str, int], Progress] | None = None) -> dict:
    """``{"metrics": ..., "per_problem": [...]}`` (metrics identical on every rank); with
    ``evaluation.completions`` > 0 each row keeps its episode's texts (y1, the hint, y2). ``progress(label, total)``
    opens the progress over this rank's problems; a stop signal ends it after the current chunk, with
    :class:`~distlab.training.session.StopRequested` on every rank."""
    mine = [tasks[i] for i in range(rt.rank, len(tasks), rt.world_size)]
    chunk = prompts_per_call(cfg.sampling, cfg.rows_per_rank(rt.world_size))
    episodes, stopped = [], False
    with (progress or (lambda label, total: Progress(total, enabled=False)))("episodes", len(mine)) as bar:
        for start in range(0, len(mine), chunk):
            if stop_requested():
                stopped = True
                break
            episodes += play(cfg, players, mine[start:start + chunk], few_shot, scorer, n=1, temperature=0.0,
                             hint_temperature=0.0, seed=seed + start, no_hint=cfg.no_hint_sample)
            bar.advance(len(mine[start:start + chunk]))
    rows = [] if stopped else [_row(ep, cfg) for ep in episodes]
    every = gathered_rows(rt, rows, stopped, tasks)
    metrics = scm.with_intervals(every) if every else {}
    metrics["n_problems"] = len(every)
    if every:  # how often turn 2 wrote y1 again unchanged (selective revision's "keep" verdict)
        metrics["keep_rate"] = sum(bool(r.get("kept")) for r in every) / len(every)
    return {"metrics": metrics, "per_problem": every}


def _row(ep, cfg: ScoreConfig) -> dict:
    """One problem's evaluation row: rewards, the hint's length and leak, and (``evaluation.completions`` > 0) the
    turns' texts, so a reader sees what a fix or a break looked like."""
    hinted = ep.hint is not None
    row = {"task_id": ep.task.task_id, "r1": ep.r1, "r2": ep.r2, "r2_no_hint": ep.r2_no_hint,
           "hint_tokens": len(ep.hint.token_ids) if hinted else None,
           "leak": leaks_code(ep.hint_text, cfg.leak_markers) if hinted else False,
           "hint": ep.hint_text if hinted else None, "turn1_status": ep.exec_status, "kept": ep.kept}
    if cfg.evaluation.completions > 0:
        row["y1"], row["y2"] = ep.y1.text, ep.y2.text
    return row


def paired_changes(before: list[dict], after: list[dict]) -> dict:
    """Before vs after on the same problems, paired: two accuracies' separate intervals overlap long after a paired
    test can tell them apart.

    Acc@t1 and Acc@t2 are pass/fail (McNemar's exact test); the change of delta(t1,t2) is graded, -2..+2 per
    problem, and usually nonzero on a handful of problems, so its ``_significant`` and ``_p`` come from the exact
    sign-flip test, not from its bootstrap interval (six +1 and one -1 of 500: interval [+0.2, +2.2] pp, p = 0.125).
    """
    fields = {}
    for name, score in (("acc_t1_change", lambda r: r["r1"]), ("acc_t2_change", lambda r: r["r2"]),
                        ("delta_change", lambda r: r["r2"] - r["r1"])):
        fields.update(paired_fields([score(r) for r in before], [score(r) for r in after],
                                    {name: "diff", f"{name}_low": "low", f"{name}_high": "high",
                                     f"{name}_significant": "significant", f"{name}_p": "p_value"}))
    return fields


def evaluate_checkpoint(cfg: ScoreConfig, session, ckpt: Path) -> dict:
    """The trained checkpoint and the base model (weights from ``model.source``) on the same problems.

    ``task.eval=mbpp task.eval_split=test`` or ``task.eval=humaneval task.eval_split=test`` picks the set.
    """
    rt = session.rt
    tasks = eval_tasks(cfg.task)
    few_shot = train_tasks(cfg.task)[: cfg.task.few_shot] if cfg.task.few_shot else []
    scorer = RewardScorer(cfg.sandbox, cfg.model.prompt_mode, rt.local_world_size)
    policy, tok = load_placed("policy", cfg, session, cfg.run.seed)
    guidance = gtok = None
    if cfg.guidance != "none":
        guidance, gtok = load_placed("guidance", guidance_config(cfg), session, cfg.run.seed + 1)
    sampling = [SamplingCopy(policy, DTYPES[cfg.models["policy"].dtype])]
    if guidance is not None:
        sampling.append(SamplingCopy(guidance, DTYPES[cfg.models["guidance"].dtype]))
    players = Players(sampling[0].module, tok, cfg.model.prompt_mode, sampling[-1].module if guidance else None,
                      gtok, cfg.guidance_prompt_mode or cfg.model.prompt_mode)
    seed = cfg.run.seed + 31
    before = evaluate_self_correction(cfg, players, tasks, few_shot, scorer, rt, seed,
                                      progress=lambda label, total: session.phase(f"base {label}", total, "problem"))
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=cfg.lr)
    session.track_model("policy", policy, [opt])
    if cfg.guidance == "trained":
        g_opt = torch.optim.AdamW([p for p in guidance.parameters() if p.requires_grad], lr=cfg.guidance_lr)
        session.track_model("guidance", guidance, [g_opt])
    meta = session.load_checkpoint(ckpt)
    for weights in sampling:
        weights.refresh()
    after = evaluate_self_correction(cfg, players, tasks, few_shot, scorer, rt, seed,
                                     progress=lambda label, total: session.phase(f"step {meta['step']} {label}",
                                                                                 total, "problem"))
    scorer.close()
    out = {"step": meta["step"], **skipped_fields(meta), "tasks": f"{cfg.task.eval}/{cfg.task.eval_split}",
           "feedback": feedback_label(cfg),
           **after["metrics"], **{f"base_{k}": v for k, v in before["metrics"].items()}}
    if len(tasks) > 1:
        out.update(paired_changes(before["per_problem"], after["per_problem"]))
    if rt.is_main:
        from distlab.atomic import atomic_write_json

        atomic_write_json(session.run_dir / "problems.json", {"before": before["per_problem"],
                                                               "after": after["per_problem"]})
    return out
