"""Optimizers for the HRM/TRM recipes (the lr schedule is the core's :mod:`distlab.training.lr_schedule`).

* Dense weights: Adam-atan2 (Everett et al. 2024), which replaces Adam's ``m / (sqrt(v) + eps)``
  by ``a * atan2(m, b * sqrt(v))``: bounded, scale invariant and free of the eps hyper-parameter.
  Provided by the maintained pure-PyTorch ``adam-atan2-pytorch`` package; AdamW is the fallback
  choice by name.
* Puzzle embeddings: :class:`SparseSignSGD` on the touched rows only, with its own LR and
  weight decay (a dense optimizer would keep state for ~1M rows that each see a handful of steps;
  for such sparse gradients Adam behaves like sign descent anyway).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from distlab.errors import DistlabError, near_matches
from distlab.runtime.dist import Runtime
from distlab.training.optim_state import adamw

from .models.puzzle_emb import SparsePuzzleEmbedding

OPTIMIZERS = ("adam_atan2", "adamw")


def adam_atan2(params: Iterable[nn.Parameter], lr: float, weight_decay: float,
               betas: tuple[float, float] = (0.9, 0.95), a: float = 1.27, b: float = 1.0) -> torch.optim.Optimizer:
    """Adam-atan2 with AdamW-style weight decay ``p *= 1 - lr * wd`` (decay follows the schedule)."""
    try:
        from adam_atan2_pytorch import AdamAtan2
    except ImportError as exc:
        raise DistlabError("optimizer adam_atan2 needs the package adam-atan2-pytorch: "
                           "pip install adam-atan2-pytorch (or set optimizer: adamw)") from exc
    return AdamAtan2(params, lr=lr, betas=betas, weight_decay=weight_decay, a=a, b=b)


def build_optimizers(model: nn.Module, optimizer: str = "adam_atan2", lr: float = 1e-4, weight_decay: float = 0.1,
                     betas: tuple[float, float] = (0.9, 0.95), puzzle_emb_lr: float = 1e-2,
                     puzzle_emb_weight_decay: float = 0.1, state_dtype: str = "fp32",
                     rt: Runtime | None = None, equal_rows: bool = False) -> list[torch.optim.Optimizer]:
    """Dense optimizer for the parameters plus, when the model has puzzle embeddings, SparseSignSGD.

    Every param group records ``base_lr`` for :func:`distlab.training.lr_schedule.set_lr`. ``model`` may be DDP/compile wrapped.
    ``state_dtype`` (``optim.state_dtype``) applies to AdamW, built by the core's
    :func:`distlab.training.optim_state.adamw`; Adam-atan2 keeps fp32 moments (its package has no other).
    ``rt`` is the runtime the sparse update combines rows over; ``equal_rows`` says every rank touches the same
    number of rows per step (see :class:`SparseSignSGD`).
    """
    if optimizer not in OPTIMIZERS:
        hint = near_matches(optimizer, OPTIMIZERS)
        raise DistlabError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}"
                           + (f" (did you mean {hint[0]!r}?)" if hint else ""))
    params = [p for p in model.parameters() if p.requires_grad]
    dense: torch.optim.Optimizer
    if optimizer == "adam_atan2":
        dense = adam_atan2(params, lr, weight_decay, betas)
    else:
        dense = adamw(params, state_dtype, lr=lr, betas=betas, weight_decay=weight_decay)
    opts = [dense]
    emb = find_puzzle_emb(model)
    if emb is not None:
        opts.append(SparseSignSGD(emb, lr=puzzle_emb_lr, weight_decay=puzzle_emb_weight_decay, rt=rt,
                                  equal_rows=equal_rows))
    for opt in opts:
        for group in opt.param_groups:
            group["base_lr"] = group["lr"]
    return opts


def find_puzzle_emb(model: nn.Module) -> SparsePuzzleEmbedding | None:
    """The model's sparse puzzle table, if it has one: its optimizer and the trainer (which chooses its slots) both
    need it, under whatever wrappers ``model`` has."""
    found = [m for m in model.modules() if isinstance(m, SparsePuzzleEmbedding)]
    return found[0] if found else None


# tables up to this many rows (Sudoku's and Maze's few identifiers) take the dense, sync-free update, which
# reads and writes the whole table every step (4,096 x 512 fp32 = 8 MiB); ARC's hundreds of thousands of
# augmented puzzles keep the row-wise update
DENSE_UPDATE_ROWS = 4096


class SparseSignSGD(torch.optim.Optimizer):
    """Distributed sign descent with decoupled weight decay on the rows a step touched.

    Every rank's (id, gradient) pairs are combined, gradients are summed per id and
    ``w = w * (1 - lr * wd) - lr * sign(g)`` is applied to those rows only. All ranks then hold the same
    table, and the result does not depend on how the global batch is split across ranks.

    How the pairs are combined depends on the table. A small table (Sudoku's and Maze's few identifiers,
    up to ``DENSE_UPDATE_ROWS``) sums its per-row gradients and touch counts locally and all-reduces them
    in one fixed-shape collective: no shape exchange and no host synchronisation, so the host keeps queueing
    the next step while the GPU runs this one. A large table (ARC's augmented puzzles) gathers the pairs:
    with ``equal_rows`` (every rank contributes the same number of rows per step, as an equal per-rank batch
    does) in one fixed-shape gather, otherwise through the ragged gather that first exchanges the shapes.

    ``rt`` combines the rows; without one, the process group this process already joined (a test
    harness, a script) is used, or none.
    """

    def __init__(self, puzzle_emb: SparsePuzzleEmbedding, lr: float = 1e-2, weight_decay: float = 0.1,
                 rt: Runtime | None = None, equal_rows: bool = False) -> None:
        if lr < 0 or weight_decay < 0:
            raise DistlabError(f"puzzle embedding lr ({lr}) and weight_decay ({weight_decay}) must be >= 0")
        self.puzzle_emb = puzzle_emb
        self.rt = rt if rt is not None else Runtime.from_process_group(puzzle_emb.weights.device)
        self.equal_rows = equal_rows
        super().__init__([puzzle_emb.weights], dict(lr=lr, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]
        ids, grads = self.puzzle_emb.pop_local_grads()
        group = self.param_groups[0]
        decay, lr = 1.0 - group["lr"] * group["weight_decay"], group["lr"]
        if self.puzzle_emb.weights.shape[0] <= DENSE_UPDATE_ROWS:
            self._dense_step(ids, grads, decay, lr)
        else:
            self._row_step(ids, grads, decay, lr)

    def _dense_step(self, ids: torch.Tensor, grads: torch.Tensor, decay: float, lr: float) -> None:
        """The whole (small) table's summed gradient plus a touch count per row, all-reduced in one collective."""
        weights = self.puzzle_emb.weights
        summed = torch.zeros(weights.shape[0], weights.shape[1] + 1, dtype=torch.float32, device=weights.device)
        summed[:, :-1].index_add_(0, ids.to(weights.device), grads.to(weights.device, torch.float32))
        summed[:, -1].index_add_(0, ids.to(weights.device), torch.ones(ids.shape[0], device=weights.device))
        summed = self.rt.all_reduce_sum(summed)
        touched = summed[:, -1:] > 0
        updated = (weights * decay).add_(torch.sign(summed[:, :-1]).to(weights.dtype), alpha=-lr)
        weights.copy_(torch.where(touched, updated, weights))

    def _row_step(self, ids: torch.Tensor, grads: torch.Tensor, decay: float, lr: float) -> None:
        """Only the touched rows of a large table; ``unique`` waits for the GPU once per step."""
        gather = self.rt.all_gather_equal if self.equal_rows else self.rt.all_gather_ragged
        ids, grads = gather(ids), gather(grads)
        if ids.numel() == 0:
            return
        weights = self.puzzle_emb.weights
        unique, inverse = ids.unique(return_inverse=True)
        summed = torch.zeros(unique.shape[0], grads.shape[1], dtype=grads.dtype, device=grads.device)
        summed.index_add_(0, inverse, grads)
        rows = weights[unique]
        rows.mul_(decay).add_(torch.sign(summed).to(rows.dtype), alpha=-lr)
        weights[unique] = rows

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Gradients live on per-batch copies that :meth:`step` consumes; copies a step did not consume (one that
        fp16 loss scaling skipped for inf/NaN gradients) are dropped here, not applied with the next step's."""
        self.puzzle_emb.drop_local_grads()

