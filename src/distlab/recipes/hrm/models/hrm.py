"""Hierarchical Reasoning Model (Wang et al. 2025), ACT v1 inner network.

A slow high-level module H and a fast low-level module L: per segment L runs ``L_cycles`` times
per H update, ``H_cycles`` H updates in all. Only the last L and the last H update are
differentiated (the "one-step gradient" approximation of the fixed point's implicit gradient),
so memory does not grow with the number of cycles.
"""

from __future__ import annotations

import torch

from .base import InnerCarry, RecurrentCore
from .config import ArchConfig, DataShape
from .layers import CosSin, ReasoningModule


class HRMInner(RecurrentCore):
    """Carry is ``(z_H, z_L)``; the output head reads z_H."""

    num_states = 2

    def __init__(self, cfg: ArchConfig, shape: DataShape) -> None:
        super().__init__(cfg, shape)
        self.H_level = ReasoningModule([self.make_block() for _ in range(cfg.H_layers)])
        self.L_level = ReasoningModule([self.make_block() for _ in range(cfg.L_layers)])

    def recur(self, carry: InnerCarry, x: torch.Tensor, cos_sin: CosSin | None) -> tuple[InnerCarry, torch.Tensor]:
        z_H, z_L = carry
        H, L = self.H_cycles, self.cfg.L_cycles
        with torch.no_grad():
            for h in range(H):
                last_h = h == H - 1
                for _ in range(L if not last_h else L - 1):
                    z_L = self.L_level(z_L, z_H + x, cos_sin)
                if not last_h:
                    z_H = self.H_level(z_H, z_L, cos_sin)
        z_L = self.L_level(z_L, z_H + x, cos_sin)
        z_H = self.H_level(z_H, z_L, cos_sin)
        return (z_H, z_L), z_H
