"""Tiny Recursive Model (Jolicoeur-Martineau 2025) inner network.

One small network does both jobs: the latent ``z`` is refined ``n`` (= ``L_cycles``) times from
(x, y, z), then the answer ``y`` from (y, z); that recursion repeats T (= ``H_cycles``) times. The
first T-1 recursions run without gradient and the last one is fully backpropagated (no
fixed-point assumption, unlike HRM's one-step gradient).
"""

from __future__ import annotations

import torch

from .base import InnerCarry, RecurrentCore
from .config import ArchConfig, DataShape
from .ema import EMA
from .layers import CosSin, ReasoningModule

__all__ = ["EMA", "TRMInner"]


class TRMInner(RecurrentCore):
    """Carry is ``(y, z)`` (stored in HRM's z_H, z_L slots); the output head reads y."""

    num_states = 2

    def __init__(self, cfg: ArchConfig, shape: DataShape) -> None:
        super().__init__(cfg, shape)
        self.net = ReasoningModule([self.make_block() for _ in range(cfg.L_layers)])

    def _recursion(self, y: torch.Tensor, z: torch.Tensor, x: torch.Tensor,
                   cos_sin: CosSin | None) -> tuple[torch.Tensor, torch.Tensor]:
        for _ in range(self.cfg.L_cycles):
            z = self.net(z, y + x, cos_sin)
        y = self.net(y, z, cos_sin)
        return y, z

    def recur(self, carry: InnerCarry, x: torch.Tensor, cos_sin: CosSin | None) -> tuple[InnerCarry, torch.Tensor]:
        y, z = carry
        with torch.no_grad():
            for _ in range(self.H_cycles - 1):
                y, z = self._recursion(y, z, x, cos_sin)
        y, z = self._recursion(y, z, x, cos_sin)
        return (y, z), y
