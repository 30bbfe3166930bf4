"""Per-puzzle embedding table trained sparsely.

The table has one row per puzzle identifier (often ~1M rows for augmented data sets): a dense
parameter would make Adam keep two more copies and DDP all-reduce all of it every step. Instead
the table is a buffer; each training forward copies the batch's rows into a small leaf tensor that
receives the gradient, and :class:`distlab.recipes.hrm.optim.SparseSignSGD` applies it to the
touched rows only.

The leaves are persistent *slots*, one per micro-batch of a step, that the trainer allocates and
chooses (:meth:`SparsePuzzleEmbedding.use_slot`) outside the compiled region; the forward only
fills the chosen one under ``no_grad``. A leaf made inside the forward (``clone().requires_grad_()``)
cannot be returned from a ``torch.compile`` graph: Dynamo broke the graph there, which split HRM's
compiled forward (and so its backward) into a dozen pieces, each with its own per-call host cost.
A forward for which no slot was chosen (a unit test, the micro-batch probe, a script calling the
model directly) still makes such a one-off leaf: the same numbers, without the compiled speed.
Slots are plain attributes, not buffers, so checkpoints and checksums never see them.
"""

from __future__ import annotations

import torch
from torch import nn

Slot = tuple[torch.Tensor, torch.Tensor]  # (rows: a leaf that requires grad, ids: the table rows they copy)


class SparsePuzzleEmbedding(nn.Module):
    """Zero-initialised table (buffer ``weights``) with per-micro-batch trainable copies."""

    def __init__(self, num_embeddings: int, dim: int, cast_to: torch.dtype) -> None:
        super().__init__()
        self.cast_to = cast_to
        self.register_buffer("weights", torch.zeros(num_embeddings, dim), persistent=True)
        self._slots: dict[int, Slot] = {}  # the trainer's persistent leaves, by micro-batch index
        self._one_off: list[Slot] = []  # leaves of training forwards no slot was chosen for, in call order
        # the slot the next training forward fills; the forward clears it, so a second forward never overwrites
        # the rows of a micro-batch whose gradient has not been taken yet
        self._next_rows: torch.Tensor | None = None
        self._next_ids: torch.Tensor | None = None

    @property
    def dim(self) -> int:
        return self.weights.shape[1]

    def use_slot(self, index: int, rows: int) -> None:
        """Make slot ``index`` (micro-batch ``index`` of the step) the leaf the next training forward fills.

        Call it outside the compiled model, before each micro-batch's forward: the slot is allocated here, once
        (again only if the micro-batch size, device or dtype changes), so the compiled graph only reads and fills
        a tensor it is given and stays whole.
        """
        slot = self._slots.get(index)
        w = self.weights
        if slot is None or slot[0].shape[0] != rows or slot[0].device != w.device or slot[0].dtype != w.dtype:
            slot = (torch.zeros(rows, self.dim, dtype=w.dtype, device=w.device, requires_grad=True),
                    torch.zeros(rows, dtype=torch.long, device=w.device))
            for t in slot:  # a fixed address, as a buffer's: a CUDA-graph replay may then write into it
                torch._dynamo.mark_static_address(t)
            self._slots[index] = slot
        self._next_rows, self._next_ids = slot

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if not (self.training and torch.is_grad_enabled()):
            # Evaluation and no-grad passes (e.g. the Q-target forward) must not fill a copy.
            return self.weights[ids].to(self.cast_to)
        rows, slot_ids = self._next_rows, self._next_ids
        if rows is None or slot_ids is None or rows.shape[0] != ids.shape[0]:
            return self._one_off_copy(ids).to(self.cast_to)
        self._next_rows = self._next_ids = None
        with torch.no_grad():  # a leaf's values may change only where autograd does not record it
            rows.copy_(self.weights[ids])
            slot_ids.copy_(ids)
        return rows.to(self.cast_to)

    def _one_off_copy(self, ids: torch.Tensor) -> torch.Tensor:
        """A fresh leaf for a forward no slot was chosen for (a graph break when compiled, correct either way)."""
        local = self.weights[ids].detach().clone().requires_grad_(True)
        self._one_off.append((local, ids.detach()))
        return local

    def drop_local_grads(self) -> None:
        """Forget the copies made since the last :meth:`pop_local_grads` (a step that was skipped)."""
        for rows, _ in self._slots.values():
            rows.grad = None
        self._one_off = []
        self._next_rows = self._next_ids = None

    def pop_local_grads(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Ids and gradients of every copy made since the last call (rows without grad dropped).

        Several copies accumulate when the trainer accumulates gradients over micro-batches: the slots in
        micro-batch order, then the one-off copies in call order (the order of a forward per micro-batch).
        """
        filled = [self._slots[i] for i in sorted(self._slots)] + self._one_off
        ids = [i for w, i in filled if w.grad is not None]
        grads = [w.grad for w, _ in filled if w.grad is not None]
        out = ((torch.cat(ids).long(), torch.cat(grads)) if ids else
               (torch.zeros(0, dtype=torch.long, device=self.weights.device),
                torch.zeros(0, self.dim, dtype=self.weights.dtype, device=self.weights.device)))
        self.drop_local_grads()
        return out
