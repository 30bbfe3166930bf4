"""Analytic FLOP count of one example for one ACT segment (for MFU).

Counts matrix multiplies and attention (2 FLOPs per multiply-add); norms, activations and
embedding look-ups are negligible. The backward pass costs twice the forward of the blocks it
runs through, and only the differentiated part of the recurrence is backpropagated (HRM: the
last L and H update; TRM: the last recursion; transformer: everything). HRM's Q-learning adds
one no-grad forward per training segment for the bootstrapped target.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .models.config import ArchConfig, DataShape
from .models.layers import swiglu_width


def block_flops(cfg: ArchConfig, seq: int) -> int:
    """Forward FLOPs of one post-norm block on one sequence of ``seq`` positions."""
    d = cfg.hidden_size
    if cfg.mlp_t:
        width_t = swiglu_width(seq, cfg.expansion)
        mixer = 2 * d * seq * 2 * width_t + 2 * d * width_t * seq
    else:
        mixer = 2 * seq * d * 3 * d + 2 * seq * d * d + 2 * 2 * seq * seq * d  # qkv, out, QK^T and AV
    width = swiglu_width(d, cfg.expansion)
    return mixer + 2 * seq * d * 2 * width + 2 * seq * width * d


def _block_calls(cfg: ArchConfig) -> tuple[int, int]:
    """(blocks run forward, blocks run with gradient) per segment."""
    if cfg.name == "hrm":
        total = cfg.H_cycles * cfg.L_cycles * cfg.L_layers + cfg.H_cycles * cfg.H_layers
        return total, cfg.L_layers + cfg.H_layers
    if cfg.name == "trm":
        per_recursion = (cfg.L_cycles + 1) * cfg.L_layers
        return cfg.H_cycles * per_recursion, per_recursion
    return cfg.num_layers, cfg.num_layers


def flops_per_example(arch_cfg: Mapping[str, Any] | ArchConfig, metadata: Any, training: bool = True) -> int:
    """FLOPs of one example per ACT segment: forward + backward when ``training``, forward only otherwise."""
    cfg = ArchConfig.from_dict(arch_cfg)
    shape = DataShape.from_metadata(metadata)
    seq = shape.seq_len + cfg.prefix_len
    block = block_flops(cfg, seq)
    heads = 2 * seq * cfg.hidden_size * shape.vocab_size + 2 * cfg.hidden_size * 2
    fwd_blocks, grad_blocks = _block_calls(cfg)
    forward = fwd_blocks * block + heads
    if not training:
        return forward
    total = forward + 2 * (grad_blocks * block + heads)
    if cfg.act == "q_learning" and cfg.halt_max_steps > 1:
        total += forward
    return total
