"""Transformer building blocks shared by the HRM, TRM and plain-transformer recipes.

Parameters are kept in float32 (so the optimizer state is exact) and cast to the compute dtype
inside ``forward``; this mirrors HRM's "casted" layers and lets bf16 run on any device without
autocast. Nothing here branches on tensor values, so the blocks compile with ``torch.compile``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import fused_mixer

CosSin = tuple[torch.Tensor, torch.Tensor]

_TRUNC = 2.0  # truncation at +-2 standard deviations, as JAX's truncated_normal


def _truncated_std_correction(bound: float = _TRUNC) -> float:
    """Factor that makes a +-bound truncated normal have the requested std (not a smaller one)."""
    pdf = math.exp(-0.5 * bound * bound) / math.sqrt(2.0 * math.pi)
    mass = math.erf(bound / math.sqrt(2.0))
    variance = 1.0 - 2.0 * bound * pdf / mass
    return 1.0 / math.sqrt(variance)


def trunc_normal_(tensor: torch.Tensor, std: float) -> torch.Tensor:
    """Fill with a truncated normal whose *actual* std is ``std`` (LeCun-style init; 0 gives zeros)."""
    with torch.no_grad():
        if std == 0:
            return tensor.zero_()
        scale = std * _truncated_std_correction()
        return nn.init.trunc_normal_(tensor, mean=0.0, std=scale, a=-_TRUNC * scale, b=_TRUNC * scale)


def find_multiple(value: int, multiple: int) -> int:
    """Round up to a multiple, so matmul shapes stay tensor-core friendly."""
    return -(value // -multiple) * multiple


def swiglu_width(hidden_size: int, expansion: float) -> int:
    """Intermediate width of a SwiGLU: 2/3 of ``expansion * hidden`` (same params as a GELU MLP)."""
    return find_multiple(round(expansion * hidden_size * 2 / 3), 256)


def rms_norm(x: torch.Tensor, eps: float, dim: int = -1) -> torch.Tensor:
    """Parameter-free RMSNorm computed in float32: bf16 squares lose too much precision."""
    dtype = x.dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.square().mean(dim, keepdim=True) + eps)
    return x.to(dtype)


class CastedLinear(nn.Module):
    """Linear layer with fp32 master weights, computed in the dtype of its input."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(trunc_normal_(torch.empty(out_features, in_features), std=in_features ** -0.5))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = self.bias.to(x.dtype) if self.bias is not None else None
        return F.linear(x, self.weight.to(x.dtype), bias)


class CastedEmbedding(nn.Module):
    """Embedding table with fp32 master weights, looked up in ``cast_to``."""

    def __init__(self, num_embeddings: int, dim: int, init_std: float, cast_to: torch.dtype) -> None:
        super().__init__()
        self.cast_to = cast_to
        self.weight = nn.Parameter(trunc_normal_(torch.empty(num_embeddings, dim), std=init_std))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight.to(self.cast_to))


class RotaryEmbedding(nn.Module):
    """Precomputed RoPE tables (half-split layout) for a fixed maximum length."""

    def __init__(self, head_dim: int, max_len: int, base: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        angles = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self) -> CosSin:
        return self.cos, self.sin


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rope(x: torch.Tensor, cos_sin: CosSin) -> torch.Tensor:
    """Rotate ``x`` of shape (B, heads, S, head_dim) in float32 (bf16 angles drift at long range)."""
    cos, sin = cos_sin
    dtype = x.dtype
    x = x.to(cos.dtype)
    return (x * cos + _rotate_half(x) * sin).to(dtype)


class Attention(nn.Module):
    """Bidirectional multi-head attention through ``scaled_dot_product_attention``."""

    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.qkv_proj = CastedLinear(hidden_size, 3 * hidden_size)
        self.o_proj = CastedLinear(hidden_size, hidden_size)

    def forward(self, x: torch.Tensor, cos_sin: CosSin | None) -> torch.Tensor:
        batch, seq, _ = x.shape
        qkv = self.qkv_proj(x).view(batch, seq, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, heads, S, head_dim)
        if cos_sin is not None:
            q, k = apply_rope(q, cos_sin), apply_rope(k, cos_sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=False)
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, -1))


class SwiGLU(nn.Module):
    """Gated MLP; used over features and, for TRM's ``mlp_t``, over sequence positions.

    The gate and up projections share one weight (``gate_up_proj``) but are applied as two matmuls on its
    halves: the same sums as one matmul and a split, without the backward pass concatenating the two
    activation gradients into one (tokens x 2 width) tensor, a full extra pass over the largest
    activation (issue 19, on an H200: 2% of HRM's step, 3% of TRM's with its positions-first mixer;
    docs/benchmarks.md).
    """

    def __init__(self, hidden_size: int, expansion: float) -> None:
        super().__init__()
        width = swiglu_width(hidden_size, expansion)
        self.gate_up_proj = CastedLinear(hidden_size, 2 * width)
        self.down_proj = CastedLinear(width, hidden_size)

    def weights(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        gate, up = self.gate_up_proj.weight.to(dtype).chunk(2, dim=0)
        return gate, up, self.down_proj.weight.to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up, down = self.weights(x.dtype)
        return F.linear(F.silu(F.linear(x, gate)) * F.linear(x, up), down)

    def mix_leading(self, x: torch.Tensor) -> torch.Tensor:
        """The same MLP along dim 0 of ``x`` (positions, batch, features): ``W @ x`` as one large matmul
        over all examples, instead of transposing the activations to put positions last."""
        gate, up, down = self.weights(x.dtype)
        flat = x.reshape(x.shape[0], -1)
        return (down @ (F.silu(gate @ flat) * (up @ flat))).view(x.shape)


class PostNormBlock(nn.Module):
    """Post-norm block (norm after each residual add) as in HRM: keeps recurrent states bounded.

    With ``seq_mix_len`` set, the attention is replaced by a SwiGLU across the sequence
    dimension (TRM's ``mlp_t``), which suits fixed-size grids such as Sudoku; such a block takes its
    input positions-first, (S, B, D) (see ``RecurrentCore.forward``), and attention blocks (B, S, D).
    Where no gradient is taken, ``fused_mixer`` runs that sub-block as one kernel (``fused_mixer.py``).
    """

    def __init__(self, hidden_size: int, num_heads: int, expansion: float, eps: float,
                 seq_mix_len: int | None = None, fused_mixer: bool = False) -> None:
        super().__init__()
        self.eps = eps
        self.fused_mixer = fused_mixer
        self.mixer: nn.Module
        if seq_mix_len is None:
            self.mixer = Attention(hidden_size, num_heads)
        else:
            self.mixer = SwiGLU(seq_mix_len, expansion)
        self.mlp = SwiGLU(hidden_size, expansion)

    def forward(self, x: torch.Tensor, cos_sin: CosSin | None) -> torch.Tensor:
        if isinstance(self.mixer, Attention):
            x = rms_norm(x + self.mixer(x, cos_sin), self.eps)
        else:
            # Sequence mixing works channel-wise: the residual is normalised over positions (dim 0), as
            # in TRM. Normalising it over features instead washes the token identities out after a few
            # recursions and the model never learns to read its input.
            x = self._mix_positions(x)
        return rms_norm(x + self.mlp(x), self.eps)

    def _mix_positions(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused_mixer and not torch.is_grad_enabled() and fused_mixer.available(x):
            return fused_mixer.seq_mixer_block(x, *self.mixer.weights(x.dtype), self.eps)
        return rms_norm(x + self.mixer.mix_leading(x), self.eps, dim=0)


class ReasoningModule(nn.Module):
    """A stack of blocks whose input is the state plus an injected signal (HRM's add injection)."""

    def __init__(self, blocks: list[PostNormBlock]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(blocks)

    def forward(self, state: torch.Tensor, injection: torch.Tensor, cos_sin: CosSin | None) -> torch.Tensor:
        x = state + injection
        for layer in self.layers:
            x = layer(x, cos_sin)
        return x
