"""Per-puzzle embedding table trained sparsely.

The table has one row per puzzle identifier (often ~1M rows for augmented data sets): a dense
parameter would make Adam keep two more copies and DDP all-reduce all of it every step. Instead
the table is a buffer; each training forward copies the batch's rows into a small leaf tensor that
receives the gradient, and :class:`distlab.recipes.hrm.optim.SparseSignSGD` applies it to the
touched rows only.
"""

from __future__ import annotations

import torch
from torch import nn


class SparsePuzzleEmbedding(nn.Module):
    """Zero-initialised table (buffer ``weights``) with per-batch trainable copies."""

    def __init__(self, num_embeddings: int, dim: int, cast_to: torch.dtype) -> None:
        super().__init__()
        self.cast_to = cast_to
        self.register_buffer("weights", torch.zeros(num_embeddings, dim), persistent=True)
        self._pending: list[tuple[torch.Tensor, torch.Tensor]] = []

    @property
    def dim(self) -> int:
        return self.weights.shape[1]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if not (self.training and torch.is_grad_enabled()):
            # Evaluation and no-grad passes (e.g. the Q-target forward) must not queue a copy.
            return self.weights[ids].to(self.cast_to)
        local = self.weights[ids].detach().clone().requires_grad_(True)
        self._pending.append((ids.detach(), local))
        return local.to(self.cast_to)

    def drop_local_grads(self) -> None:
        """Forget the copies made since the last :meth:`pop_local_grads` (a step that was skipped)."""
        self._pending = []

    def pop_local_grads(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Ids and gradients of every copy made since the last call (rows without grad dropped).

        Several copies accumulate when the trainer accumulates gradients over micro-batches.
        """
        pending, self._pending = self._pending, []
        ids = [i for i, w in pending if w.grad is not None]
        grads = [w.grad for _, w in pending if w.grad is not None]
        if not ids:
            return (torch.zeros(0, dtype=torch.long, device=self.weights.device),
                    torch.zeros(0, self.dim, dtype=self.weights.dtype, device=self.weights.device))
        return torch.cat(ids).long(), torch.cat(grads)
