"""Evaluation on every rank, gathered on rank 0: exact and token accuracy, halting, difficulty, ARC pass@k.

Each rank evaluates a disjoint slice of the test split (padding rows carry no labels, so they are
never counted); metric sums are reduced exactly, per-example results are gathered for the
difficulty table, saved predictions and ARC voting.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from distlab.atomic import atomic_path, atomic_write_json, atomic_write_text
from distlab.recipes.hrm.batch import make_batch
from distlab.recipes.hrm.data.format import PuzzleSplit
from distlab.sampler import eval_shard
from distlab.wrap import unwrap

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
    for idx, mask in zip(shard.indices, shard.masks):
        batch = make_batch(split, idx, rt.device, arrays)
        keep = torch.from_numpy(mask).to(rt.device)
        batch["labels"][~keep] = -100  # padding rows: no valid token, never counted
        carry = unwrap(model).initial_carry(batch)
        while True:
            with session.autocast():
                carry, _, metrics, outputs, all_halted = model(carry, batch)
            if bool(all_halted):
                break
        for k in sums:
            sums[k] += float(metrics[k])
        labels = batch["labels"]
        valid = labels != -100
        exact = ((outputs["preds"] == labels) | ~valid).all(-1)
        _count_cells(cells, batch["inputs"], labels, outputs["preds"], keep)
        mine["index"].append(idx[mask])
        mine["exact"].append(exact[keep].cpu().numpy())
        mine["preds"].append(outputs["preds"][keep].to(torch.int16).cpu().numpy())
        mine["q_halt"].append(outputs["q_halt_logits"][keep].float().cpu().numpy())
    if was_training:
        model.train()
    tot = rt.reduce_sums({**sums, **cells})
    count = max(tot["count"], 1.0)
    result = {"exact_accuracy": tot["exact_accuracy"] / count, "token_accuracy": tot["accuracy"] / count,
              "accuracy": tot["accuracy"] / count, "mean_steps": tot["steps"] / count,
              "q_halt_accuracy": tot["q_halt_accuracy"] / count, "count": int(tot["count"]),
              **_cell_metrics(tot)}
    local = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in mine.items()}
    gathered = rt.all_gather_object(local)
    if rt.is_main:
        result.update(_per_example_reports(split, gathered, save_dir, session.cfg))
    return result


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
