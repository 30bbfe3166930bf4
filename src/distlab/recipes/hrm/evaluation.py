"""Evaluation on every rank, gathered on rank 0: exact and token accuracy, halting, difficulty, ARC pass@k.

Each rank evaluates a disjoint slice of the test split (padding rows carry no labels, so they are
never counted); metric sums are reduced exactly, per-example results are gathered for the
difficulty table, saved predictions and ARC voting.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch

from distlab.atomic import atomic_path, atomic_write_json, atomic_write_text
from distlab.recipes.hrm.batch import make_batch
from distlab.recipes.hrm.data.format import PuzzleSplit
from distlab.recipes.hrm.models.loss import run_segment
from distlab.runtime.sampler import eval_shard
from distlab.training.wrap import replays_cuda_graphs, unwrap

log = logging.getLogger("distlab")


def _eval_indices(cfg, split: PuzzleSplit, interim: bool) -> int:
    n = split.num_examples
    if cfg.data.eval_limit > 0:
        n = min(n, cfg.data.eval_limit)
    return min(n, cfg.data.interim_eval_limit) if interim and cfg.data.interim_eval_limit > 0 else n


@torch.no_grad()
def evaluate(cfg, session, model, split: PuzzleSplit, save_dir: Path | None = None, interim: bool = False) -> dict:
    """``interim``: an evaluation during training, on ``data.interim_eval_limit`` examples when that is set."""
    rt = session.rt
    n = _eval_indices(cfg, split, interim)
    local_batch = max(1, cfg.global_batch_size // rt.world_size)
    shard = eval_shard(n, local_batch, rt.rank, rt.world_size)
    arrays = split.example_arrays()
    was_training = model.training
    model.eval()
    sums = {"count": 0.0, "accuracy": 0.0, "exact_accuracy": 0.0, "steps": 0.0, "q_halt_accuracy": 0.0}
    cells = dict.fromkeys(("tokens", "blank", "blank_correct", "copy_correct", "copy_exact"), 0.0)
    mine: dict[str, list] = {"index": [], "exact": [], "preds": [], "q_halt": []}
    ecfg = getattr(cfg, "eval", None)
    samples = ecfg.samples if ecfg is not None else 1
    if samples > 1:
        sums.update(dict.fromkeys(SAMPLED_KEYS, 0.0))
    inner = _inner(model)
    saved_cycles, inner.active_H_cycles = inner.active_H_cycles, None  # evaluation runs the full H_cycles
    bar = session.phase("eval", len(shard.indices), "batch")  # a full test set takes minutes: count, rate, ETA
    try:
        for b, (idx, mask) in enumerate(zip(shard.indices, shard.masks)):
            batch = make_batch(split, idx, rt.device, arrays)
            keep = torch.from_numpy(mask).to(rt.device)
            batch["labels"][~keep] = -100  # padding rows: no valid token, never counted
            t0 = _clock(rt.device)
            metrics, outputs = _trajectory(session, model, batch)
            t1 = _clock(rt.device)
            for k in ("count", "accuracy", "exact_accuracy", "steps", "q_halt_accuracy"):
                sums[k] += float(metrics[k])
            labels = batch["labels"]
            valid = labels != -100
            exact = ((outputs["preds"] == labels) | ~valid).all(-1)
            _count_cells(cells, batch["inputs"], labels, outputs["preds"], keep)
            mine["index"].append(idx[mask])
            mine["exact"].append(exact[keep].cpu().numpy())
            mine["preds"].append(outputs["preds"][keep].to(torch.int16).cpu().numpy())
            mine["q_halt"].append(outputs["q_halt_logits"][keep].float().cpu().numpy())
            if samples > 1:
                preds, qs = [outputs["preds"]], [outputs["q_halt_logits"].float()]
                for k in range(1, samples):
                    gen = torch.Generator(device=rt.device)
                    gen.manual_seed(_noise_seed(cfg, ecfg, rt.rank, b, k))
                    inner.eval_noise = (ecfg.noise, ecfg.noise_scale, gen)
                    try:
                        _, out_k = _trajectory(session, model, batch)
                    finally:
                        inner.eval_noise = None
                    preds.append(out_k["preds"])
                    qs.append(out_k["q_halt_logits"].float())
                preds_k, q_k = torch.stack(preds), torch.stack(qs)
                pick = select_trajectories(preds_k, q_k, ecfg.select)
                _add_sampled(sums, batch["inputs"], labels, preds_k, pick, keep)
                sums["sampled_time_s"] += _clock(rt.device) - t1
                sums["base_time_s"] += t1 - t0
            bar.advance()
    finally:
        bar.close()
        inner.active_H_cycles = saved_cycles
        inner.eval_noise = None
        if was_training:
            model.train()
    tot = rt.reduce_sums({**sums, **cells})
    count = max(tot["count"], 1.0)
    result = {"exact_accuracy": tot["exact_accuracy"] / count, "token_accuracy": tot["accuracy"] / count,
              "accuracy": tot["accuracy"] / count, "mean_steps": tot["steps"] / count,
              "q_halt_accuracy": tot["q_halt_accuracy"] / count, "count": int(tot["count"]),
              **_cell_metrics(tot)}
    if samples > 1:
        result.update(_sampled_metrics(tot, samples, ecfg, rt.world_size))
    local = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in mine.items()}
    gathered = rt.all_gather_object(local)
    if rt.is_main:
        result.update(_per_example_reports(split, gathered, save_dir, session.cfg))
    return result


SAMPLED_KEYS = ("sampled_accuracy", "sampled_exact_accuracy", "sampled_oracle_exact", "sampled_blank",
                "sampled_blank_correct", "sampled_time_s", "base_time_s")


def _inner(model):
    """The recurrent core under the wrapper, the loss head and the ACT loop."""
    return unwrap(model).model.inner


def _clock(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _noise_seed(cfg, ecfg, rank: int, batch: int, sample: int) -> int:
    """One seed per (rank, batch, trajectory): the same checkpoint and settings draw the same noise."""
    run_seed = cfg.run.seed if hasattr(cfg, "run") else 0
    return (run_seed + ecfg.seed) * 1_000_003 + rank * 7_919_311 + batch * 104_729 + sample


def _trajectory(session, model, batch: dict[str, torch.Tensor]) -> tuple[dict, dict]:
    """Every ACT segment of one batch (evaluation halts a batch together); the last segment's metrics, outputs."""
    carry = unwrap(model).initial_carry(batch)
    graphs = replays_cuda_graphs(session.cfg.dist, session.rt.device)
    while True:
        with session.autocast():
            carry, _, metrics, outputs, all_halted = run_segment(model, carry, batch, graphs)
        if bool(all_halted):
            return metrics, outputs


def select_trajectories(preds: torch.Tensor, q_halt: torch.Tensor, how: str) -> torch.Tensor:
    """Per puzzle, the trajectory to keep: ``preds`` (K, B, L) decoded answers, ``q_halt`` (K, B) final logits.

    ``q``: the highest q_halt. ``vote``: the answer most trajectories decoded, ties broken by the highest
    q_halt among the tied trajectories. Exact ties fall to the lowest trajectory (0 = the noise-free one).
    """
    if how == "q":
        return _first_argmax(q_halt)
    if how != "vote":
        raise ValueError(f"eval.select={how!r} is not one of q, vote")
    same = (preds.unsqueeze(0) == preds.unsqueeze(1)).all(-1)  # (K, K, B): trajectories j, k agree
    votes = same.sum(1)  # (K, B)
    top = votes == votes.max(0, keepdim=True).values
    return _first_argmax(torch.where(top, q_halt, torch.full_like(q_halt, -torch.inf)))


def _first_argmax(x: torch.Tensor) -> torch.Tensor:
    """Argmax over dim 0, the lowest index on ties (torch.argmax does not promise which)."""
    k = torch.arange(x.shape[0], device=x.device).view(-1, *([1] * (x.ndim - 1)))
    best = x == x.max(0, keepdim=True).values
    return torch.where(best, k, x.shape[0]).min(0).values


def _add_sampled(sums: dict[str, float], inputs: torch.Tensor, labels: torch.Tensor, preds_k: torch.Tensor,
                 pick: torch.Tensor, keep: torch.Tensor) -> None:
    """The chosen trajectory's scores, defined as the loss head's (count: rows with labels) and _count_cells'."""
    preds = preds_k.gather(0, pick.view(1, -1, 1).expand(1, *preds_k.shape[1:]))[0]
    valid = labels != -100
    n_valid = valid.sum(-1)
    counted = keep & (n_valid > 0)
    correct = (preds == labels) & valid
    sums["sampled_accuracy"] += float(torch.where(counted, correct.sum(-1) / n_valid.clamp_min(1), 0).sum())
    sums["sampled_exact_accuracy"] += float((counted & (correct.sum(-1) == n_valid)).sum())
    each = ((preds_k == labels) | ~valid).all(-1)  # (K, B)
    sums["sampled_oracle_exact"] += float((counted & each.any(0)).sum())
    blank = valid & (inputs != labels)
    sums["sampled_blank"] += float(blank.sum())
    sums["sampled_blank_correct"] += float((correct & blank).sum())


def _sampled_metrics(tot: dict[str, float], samples: int, ecfg, world_size: int) -> dict:
    """The selected answers' scores beside the plain ones, and what the K-1 extra trajectories cost.

    Times are seconds per rank (summed over ranks, / world size); ``sampled_eval_cost`` = all K trajectories'
    time / the noise-free one's.
    """
    count = max(tot["count"], 1.0)
    base, extra = tot["base_time_s"] / world_size, tot["sampled_time_s"] / world_size
    return {"samples": samples, "sample_select": ecfg.select, "sample_noise": ecfg.noise,
            "sample_noise_scale": ecfg.noise_scale,
            "sampled_exact_accuracy": tot["sampled_exact_accuracy"] / count,
            "sampled_token_accuracy": tot["sampled_accuracy"] / count,
            "sampled_blank_accuracy": (tot["sampled_blank_correct"] / tot["sampled_blank"] if tot["sampled_blank"]
                                       else float("nan")),
            "sampled_oracle_exact_accuracy": tot["sampled_oracle_exact"] / count,
            "eval_time_s": base, "sampled_eval_time_s": base + extra,
            "sampled_extra_time_s": extra, "sampled_eval_cost": (base + extra) / base if base > 0 else float("nan")}


def _count_cells(cells: dict[str, float], inputs: torch.Tensor, labels: torch.Tensor, preds: torch.Tensor,
                 keep: torch.Tensor) -> None:
    """Add this batch's cell counts: the cells to fill, those filled right, and what copying the input scores."""
    valid = labels != -100
    given = (inputs == labels) & valid  # the answer is already in the input (Sudoku: the clues)
    blank = valid & ~given  # the cells the model has to work out (Sudoku: the blanks)
    cells["tokens"] += float(valid.sum())
    cells["blank"] += float(blank.sum())
    cells["blank_correct"] += float(((preds == labels) & blank).sum())
    cells["copy_correct"] += float(given.sum())
    cells["copy_exact"] += float(((given | ~valid).all(-1) & keep).sum())


def _cell_metrics(tot: dict[str, float]) -> dict[str, float]:
    """The numbers that make a headline honest.

    ``token_accuracy`` counts the clues a model only has to copy, so on a Sudoku with few blanks it is
    high for any model; ``blank_accuracy`` scores only the cells whose answer is not in the input, and the
    copy-the-input baseline shows what predicting the input unchanged would already score.
    """
    count = max(tot["count"], 1.0)
    return {"blank_accuracy": tot["blank_correct"] / tot["blank"] if tot["blank"] else float("nan"),
            "blank_cells": int(tot["blank"]),
            "copy_baseline_token_accuracy": tot["copy_correct"] / max(tot["tokens"], 1.0),
            "copy_baseline_exact_accuracy": tot["copy_exact"] / count}


def blank_counts(split: PuzzleSplit, index: np.ndarray, preds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per example: the cells not given in the input that the prediction got right, and how many there are."""
    inputs, labels, _ = split.example_arrays()
    x, y = np.asarray(inputs[index]), np.asarray(labels[index])
    ignore = split.metadata.ignore_label_id
    blank = (x != y) if ignore is None else (y != ignore) & (x != y)
    return ((preds == y) & blank).sum(-1), blank.sum(-1)


def _per_example_reports(split: PuzzleSplit, parts: list[dict], save_dir: Path | None, cfg) -> dict:
    index = np.concatenate([p["index"] for p in parts]).astype(np.int64)
    exact = np.concatenate([p["exact"] for p in parts]).astype(bool)
    preds = np.concatenate([p["preds"] for p in parts])
    q_halt = np.concatenate([p["q_halt"] for p in parts])
    order = np.argsort(index)
    index, exact, preds, q_halt = index[order], exact[order], preds[order], q_halt[order]
    out: dict = {}
    diff = split.difficulty
    from distlab.recipes.hrm.buckets import accuracy_by_difficulty, plot_buckets, render_table

    rows = accuracy_by_difficulty(diff[index] if diff is not None else np.full(len(index), np.nan), exact,
                                  blank=blank_counts(split, index, preds))
    out["by_difficulty"] = rows
    arc_meta = Path(split.directory) / "arc_meta.json"
    if arc_meta.exists():
        from distlab.recipes.hrm.arc_eval import arc_pass_at_k

        arc = arc_pass_at_k(Path(split.directory), index, preds, q_halt)
        out.update({k: v for k, v in arc.items() if k.startswith("pass@")})
        out["arc_tasks"] = arc.get("tasks")
    if save_dir is not None:
        save_dir = Path(save_dir)
        with atomic_path(save_dir / "predictions.npz") as tmp:
            np.savez_compressed(tmp, index=index, preds=preds, q_halt=q_halt, exact=exact)
        atomic_write_json(save_dir / "by_difficulty.json", rows)
        atomic_write_text(save_dir / "by_difficulty.md", render_table(rows) + "\n")
        plot_buckets(rows, save_dir / "by_difficulty.png", f"{cfg.run.name}: exact accuracy by difficulty")
    return out
