"""Plain deep transformer baseline with the same outer loop as HRM/TRM.

Each ACT segment applies ``num_layers`` blocks once, with full backprop, to the carried state plus
the input embedding; comparing it with HRM at matched parameter count isolates what the
recurrence (rather than depth or deep supervision) buys.
"""

from __future__ import annotations

import torch

from .base import InnerCarry, RecurrentCore
from .config import ArchConfig, DataShape
from .layers import CosSin, ReasoningModule


class TransformerInner(RecurrentCore):
    """Carry is ``(z,)``."""

    num_states = 1

    def __init__(self, cfg: ArchConfig, shape: DataShape) -> None:
        super().__init__(cfg, shape)
        self.stack = ReasoningModule([self.make_block() for _ in range(cfg.num_layers)])

    def recur(self, carry: InnerCarry, x: torch.Tensor, cos_sin: CosSin | None) -> tuple[InnerCarry, torch.Tensor]:
        (z,) = carry
        z = self.stack(z, x, cos_sin)
        return (z,), z
