"""Input/output plumbing shared by every recurrent inner network (HRM, TRM, transformer).

Subclasses only say how the carried states are updated in one ACT segment (:meth:`recur`);
embedding, puzzle prefix, positions, output heads and the carried-state reset live here so the
three architectures differ in exactly one place.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import torch
import torch.nn.functional as F
from torch import nn

from .config import ArchConfig, DataShape
from .layers import CastedEmbedding, CastedLinear, CosSin, PostNormBlock, RotaryEmbedding, trunc_normal_
from .puzzle_emb import SparsePuzzleEmbedding

InnerCarry = tuple[torch.Tensor, ...]

_HALF_SQRT2 = 1.0 / math.sqrt(2.0)


class RecurrentCore(nn.Module, ABC):
    """Base inner network: ``forward(carry, batch) -> (carry, logits, q_halt, q_continue)``."""

    num_states: int = 1

    def checkpoint_blocks(self) -> list[nn.Module]:
        """The blocks ``dist.activation_checkpointing`` recomputes: every reasoning block (H, L, TRM's net,
        the transformer's stack), in the order they are built."""
        return [m for m in self.modules() if isinstance(m, PostNormBlock)]

    def __init__(self, cfg: ArchConfig, shape: DataShape) -> None:
        super().__init__()
        self.cfg = cfg
        self.shape = shape
        self.dtype = cfg.dtype
        self.prefix_len = cfg.prefix_len
        self.total_len = shape.seq_len + self.prefix_len
        self.embed_scale = math.sqrt(cfg.hidden_size)

        self.embed_tokens = CastedEmbedding(shape.vocab_size, cfg.hidden_size, 1.0 / self.embed_scale, self.dtype)
        self.lm_head = CastedLinear(cfg.hidden_size, shape.vocab_size)
        self.q_head = CastedLinear(cfg.hidden_size, 2, bias=True)
        with torch.no_grad():  # Q starts near "never halt" so early ACT behaves like fixed depth
            self.q_head.weight.zero_()
            self.q_head.bias.fill_(-5.0)

        self.puzzle_emb = (SparsePuzzleEmbedding(shape.num_puzzle_identifiers, cfg.puzzle_emb_ndim, self.dtype)
                           if cfg.puzzle_emb_ndim > 0 else None)
        self.rotary = None
        self.embed_pos = None
        if cfg.pos_encodings == "rope" and not cfg.mlp_t:
            self.rotary = RotaryEmbedding(cfg.hidden_size // cfg.num_heads, self.total_len, cfg.rope_theta)
        elif cfg.pos_encodings == "learned":
            self.embed_pos = CastedEmbedding(self.total_len, cfg.hidden_size, 1.0 / self.embed_scale, self.dtype)

        init = trunc_normal_(torch.empty(self.num_states, cfg.hidden_size), std=1.0)
        self.register_buffer("state_init", init.to(self.dtype), persistent=True)
        self.active_H_cycles: int | None = None  # arch.curriculum's depth for this training step; None = H_cycles
        # test-time sampling (eval.samples): (mode, scale, generator) or None; see evaluation.py
        self.eval_noise: tuple[str, float, torch.Generator] | None = None

    @property
    def H_cycles(self) -> int:
        """Outer cycles this segment runs: the curriculum's while training under ``arch.curriculum``."""
        return self.active_H_cycles or self.cfg.H_cycles

    def _noise(self, z: torch.Tensor) -> torch.Tensor:
        _, scale, gen = self.eval_noise
        return scale * torch.randn(z.shape, generator=gen, device=z.device, dtype=torch.float32).to(z.dtype)

    def make_block(self) -> PostNormBlock:
        cfg = self.cfg
        return PostNormBlock(cfg.hidden_size, cfg.num_heads, cfg.expansion, cfg.rms_norm_eps,
                             seq_mix_len=self.total_len if cfg.mlp_t else None, fused_mixer=cfg.fused_mixer)

    # --- carried state -------------------------------------------------------------------------
    def empty_carry(self, batch_size: int, device: torch.device) -> InnerCarry:
        shape = (batch_size, self.total_len, self.cfg.hidden_size)
        return tuple(torch.zeros(shape, dtype=self.dtype, device=device) for _ in range(self.num_states))

    def reset_carry(self, reset: torch.Tensor, carry: InnerCarry) -> InnerCarry:
        flag = reset.view(-1, 1, 1)
        if self.eval_noise is not None and self.eval_noise[0] == "init":
            return tuple(torch.where(flag, self.state_init[i] + self._noise(z), z) for i, z in enumerate(carry))
        return tuple(torch.where(flag, self.state_init[i], z) for i, z in enumerate(carry))

    # --- input / output ------------------------------------------------------------------------
    def input_embeddings(self, inputs: torch.Tensor, puzzle_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(inputs.to(torch.int32))
        if self.puzzle_emb is not None:
            pz = self.puzzle_emb(puzzle_ids)
            pz = F.pad(pz, (0, self.prefix_len * self.cfg.hidden_size - pz.shape[-1]))
            x = torch.cat((pz.view(-1, self.prefix_len, self.cfg.hidden_size), x), dim=-2)
        if self.embed_pos is not None:
            x = _HALF_SQRT2 * (x + self.embed_pos.weight.to(self.dtype))  # keep unit variance
        return self.embed_scale * x

    def cos_sin(self) -> CosSin | None:
        return self.rotary() if self.rotary is not None else None

    @abstractmethod
    def recur(self, carry: InnerCarry, x: torch.Tensor, cos_sin: CosSin | None) -> tuple[InnerCarry, torch.Tensor]:
        """Update the carried states for one segment; return them and the state to decode."""

    def forward(self, carry: InnerCarry, batch: dict[str, torch.Tensor]
                ) -> tuple[InnerCarry, torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.input_embeddings(batch["inputs"], batch["puzzle_identifiers"])
        if self.eval_noise is not None and self.eval_noise[0] == "latent":
            carry = tuple(z + self._noise(z) for z in carry)
        if self.cfg.mlp_t:
            # positions-first inside the segment: each sequence-mixer matmul is then one GEMM over the whole
            # batch with no transposed copy per block (8% of TRM's step on an H200; docs/benchmarks.md)
            carry, x = tuple(z.transpose(0, 1).contiguous() for z in carry), x.transpose(0, 1).contiguous()
        carry, out = self.recur(carry, x, self.cos_sin())
        if self.cfg.mlp_t:
            carry, out = tuple(z.transpose(0, 1) for z in carry), out.transpose(0, 1)
        logits = self.lm_head(out)[:, self.prefix_len:]
        q = self.q_head(out[:, 0]).to(torch.float32)
        return tuple(z.detach() for z in carry), logits, q[..., 0], q[..., 1]
