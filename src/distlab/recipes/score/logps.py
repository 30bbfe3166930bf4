"""``lm.logprobs.token_logprobs`` for a model that may be wrapped in DDP.

``token_logprobs`` finds the LM head through ``get_base_model`` (peft) or on the model itself, and a
``DistributedDataParallel`` wrapper has neither, so it cannot be passed directly; unwrapping it
instead would skip DDP's forward, and with it the gradient all-reduce. :class:`ForwardThrough` gives
the head lookup the inner model and sends the forward call through the wrapper.
"""

from __future__ import annotations

import torch
from torch import nn

from distlab.recipes.lm.logprobs import token_logprobs
from distlab.recipes.lm.model_parts import unwrap_model
from distlab.wrap import unwrap


class ForwardThrough:
    """Head lookups see the HF model inside; calls go through the (DDP) wrapper."""

    def __init__(self, wrapped: nn.Module) -> None:
        self.wrapped = wrapped

    def get_base_model(self) -> nn.Module:
        return unwrap_model(unwrap(self.wrapped))

    def __call__(self, *args, **kwargs):
        return self.wrapped(*args, **kwargs)


def compute_device(model: nn.Module) -> torch.device:
    """Where a model computes: an ``offload``-placed model keeps its weights on the CPU but runs on its device."""
    inner = unwrap(model)
    return getattr(inner, "_distlab_offload_device", None) or next(inner.parameters()).device


def logprobs(model: nn.Module, ids: torch.Tensor, attn: torch.Tensor, mask: torch.Tensor, *, chunk_tokens: int,
             temperature: float = 1.0, entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs (and entropies) of ``mask``ed tokens, on the model's device, gradients as enabled."""
    dev = compute_device(model)
    target = ForwardThrough(model) if unwrap(model) is not model else model
    return token_logprobs(target, ids.to(dev), attn.to(dev), completion_mask=mask.to(dev), chunk_tokens=chunk_tokens,
                          temperature=temperature if temperature > 0 else 1.0, with_entropy=entropy)
