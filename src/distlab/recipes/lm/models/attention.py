"""``grouped_sdpa``: transformers' SDPA attention, except that a one-token decode step never copies K/V.

With grouped-query attention (Qwen2.5-0.5B: 14 query heads over 2 key/value heads; SmolLM2: 9 over 3) and an
attention mask, which a static KV cache always has, transformers' ``sdpa`` expands every cached key and value to
all query heads before calling SDPA (``repeat_kv``; its one-token shortcut is off under ``torch.compile``, and
absent in older releases). A decode step is bound by reading that cache, so the copy multiplies its traffic by
the group size. Here the query heads of one group become the query rows of their shared key/value head:
``[B, H, 1, D] -> [B, H_kv, H/H_kv, D]``, the same dot products on K/V as cached, and the mask, shared by all
heads, broadcasts over the group. Every other call (prefill, training passes, per-head masks) goes to
transformers' ``sdpa`` unchanged, so only the decode kernel's inputs differ.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

GROUPED_SDPA = "grouped_sdpa"
_fallback = None  # transformers' sdpa_attention_forward, bound once by register_grouped_sdpa (not per layer call)


def attention_names() -> tuple[str, ...]:
    """Every ``attn_implementation`` this transformers takes, ``grouped_sdpa`` first: what a setting is checked
    against before any process starts."""
    from distlab.training.optim_state import import_torchao_quietly

    import_torchao_quietly()  # transformers imports it: first, without its error-looking lines
    from transformers import AttentionInterface

    return (GROUPED_SDPA, "eager", *AttentionInterface._global_mapping)


def grouped_sdpa_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                         **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention-function protocol: ``query [B, H, Q, D]``, ``key/value [B, H_kv, T, D]`` in,
    ``([B, Q, H, D], None)`` out."""
    groups = getattr(module, "num_key_value_groups", 1)
    batch, heads, q_len, dim = query.shape
    shared_mask = attention_mask is None or attention_mask.shape[1] == 1
    if groups == 1 or q_len != 1 or not shared_mask or dropout or kwargs.get("position_bias") is not None:
        return _fallback(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    stacked = query.reshape(batch, heads // groups, groups, dim)  # query head h -> (h // groups, h % groups)
    out = F.scaled_dot_product_attention(stacked, key, value, attn_mask=attention_mask, scale=scaling)
    return out.reshape(batch, heads, 1, value.shape[-1]).transpose(1, 2).contiguous(), None


def register_grouped_sdpa() -> None:
    """Make ``grouped_sdpa`` a name transformers accepts for ``attn_implementation``, with SDPA's masks.
    Idempotent; every loader calls it before a model with that name runs."""
    global _fallback
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask

    _fallback = sdpa_attention_forward
    AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_forward)
    if GROUPED_SDPA not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:
        AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)
