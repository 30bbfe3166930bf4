"""Adaptive computation time (ACT) outer loop with deep supervision.

One call = one segment for every sequence of the batch. Each sequence carries its recurrent
state across calls (detached, so each segment is supervised separately) until it halts; a halted
slot is refilled from the next batch on the following call. The trainer therefore keeps feeding
batches and never waits for a whole batch to finish.

Halting modes (``act``):
  * ``q_learning``: HRM. Halt when q_halt > q_continue; q_continue is regressed on the
    bootstrapped target sigmoid(max(next q_halt, next q_continue)) from one extra no-grad forward.
  * ``halt_only``: TRM. Halt when q_halt > 0 (q_halt learns "the answer is already correct").
  * ``fixed``: always exactly ``halt_max_steps`` segments.
  * ``none``: a single segment, no outer loop.
In evaluation every learned mode runs ``halt_max_steps`` segments so a batch halts together.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .base import InnerCarry, RecurrentCore


@dataclass
class ACTCarry:
    inner: InnerCarry
    steps: torch.Tensor  # (B,) int32, segments done on the current example
    halted: torch.Tensor  # (B,) bool, slot takes a new example on the next call
    current_data: dict[str, torch.Tensor]

    def clone(self) -> ACTCarry:
        """A copy in fresh memory: under CUDA-graph replay the returned carry lives in the graph's output
        buffers, which the next replay (the very call that reads the carry) overwrites."""
        return ACTCarry(tuple(z.clone() for z in self.inner), self.steps.clone(), self.halted.clone(),
                        {k: v.clone() for k, v in self.current_data.items()})


class ACTModel(nn.Module):
    """Wraps an inner :class:`RecurrentCore`; ``forward(carry, batch) -> (carry, outputs)``."""

    def __init__(self, inner: RecurrentCore, act: str, halt_max_steps: int, exploration_prob: float) -> None:
        super().__init__()
        self.inner = inner
        self.act = act
        self.max_steps = 1 if act == "none" else halt_max_steps
        self.exploration_prob = exploration_prob

    @property
    def puzzle_emb(self) -> nn.Module | None:
        return self.inner.puzzle_emb

    def initial_carry(self, batch: dict[str, torch.Tensor]) -> ACTCarry:
        """All slots start halted, so the first call loads the whole batch."""
        inputs = batch["inputs"]
        size, device = inputs.shape[0], inputs.device
        return ACTCarry(
            inner=self.inner.empty_carry(size, device),
            steps=torch.zeros(size, dtype=torch.int32, device=device),
            halted=torch.ones(size, dtype=torch.bool, device=device),
            current_data={k: torch.zeros_like(v) for k, v in batch.items()},
        )

    def forward(self, carry: ACTCarry, batch: dict[str, torch.Tensor]) -> tuple[ACTCarry, dict[str, torch.Tensor]]:
        inner = self.inner.reset_carry(carry.halted, carry.inner)
        steps = torch.where(carry.halted, 0, carry.steps)
        data = {k: torch.where(carry.halted.view((-1,) + (1,) * (batch[k].ndim - 1)), batch[k], v)
                for k, v in carry.current_data.items()}

        inner, logits, q_halt, q_continue = self.inner(inner, data)
        outputs = {"logits": logits, "q_halt_logits": q_halt, "q_continue_logits": q_continue}

        with torch.no_grad():
            steps = steps + 1
            halted = self._halted(steps, q_halt, q_continue)
            if self._learns_halting and self.act == "q_learning":
                outputs["target_q_continue"] = self._continue_target(inner, data, steps)
        return ACTCarry(inner, steps, halted, data), outputs

    @property
    def _learns_halting(self) -> bool:
        return self.training and self.max_steps > 1 and self.act in ("q_learning", "halt_only")

    def _halted(self, steps: torch.Tensor, q_halt: torch.Tensor, q_continue: torch.Tensor) -> torch.Tensor:
        last = steps >= self.max_steps
        if not self._learns_halting:
            return last
        wants = q_halt > q_continue if self.act == "q_learning" else q_halt > 0
        # Exploration: with prob p, force a random minimum of 2..max segments before halting.
        explore = torch.rand_like(q_halt) < self.exploration_prob
        min_steps = explore * torch.randint_like(steps, low=2, high=self.max_steps + 1)
        return (last | wants) & (steps >= min_steps)

    def _continue_target(self, inner: InnerCarry, data: dict[str, torch.Tensor], steps: torch.Tensor) -> torch.Tensor:
        """Q-learning target for "continue": value of the best action one segment later.

        No replay buffer or target network: the many parallel sequences of a large batch
        decorrelate the updates (as in PQN).
        """
        _, _, next_halt, next_continue = self.inner(inner, data)
        is_last = steps >= self.max_steps
        return torch.sigmoid(torch.where(is_last, next_halt, torch.maximum(next_halt, next_continue)))
