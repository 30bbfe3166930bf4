"""Structural helpers around a loaded causal LM: its decoder layers, checkpointing and LoRA adapters.

The training code shards with FSDP2 per decoder layer, recomputes activations to fit long rollouts,
and may train only low-rank adapters; each of these needs to find the same parts of models that come
wrapped (peft) or unwrapped, so the lookups live here once.
"""

from __future__ import annotations

import torch
from torch import nn

# Projection names of Llama-family decoder layers (Llama, Qwen2, Mistral, SmolLM2).
LLAMA_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def unwrap_model(model: nn.Module) -> nn.Module:
    """The underlying ``transformers`` model under DDP, ``torch.compile`` and peft wrappers."""
    from distlab.training.wrap import unwrap

    model = unwrap(model)
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks in order, the unit FSDP2 shards and checkpointing recomputes.

    Uses ``get_decoder().layers`` (every HF decoder-only model); otherwise the longest
    ``nn.ModuleList`` whose name ends in ``layers`` or ``h`` (GPT-2 style).
    """
    base = unwrap_model(model)
    get_decoder = getattr(base, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else None
    layers = getattr(decoder, "layers", None)
    if isinstance(layers, nn.ModuleList):
        return list(layers)
    lists = [m for name, m in base.named_modules()
             if isinstance(m, nn.ModuleList) and name.rsplit(".", 1)[-1] in ("layers", "h")]
    if not lists:
        raise ValueError(f"no decoder layer list found in {type(base).__name__}")
    return list(max(lists, key=len))


def enable_gradient_checkpointing(model: nn.Module) -> None:
    """Recompute each decoder layer in backward; non-reentrant so it works with FSDP2 and frozen inputs."""
    base = unwrap_model(model)
    kwargs = {"use_reentrant": False}
    if hasattr(base, "activation_checkpointing_enable"):  # transformers >= 5.x name
        base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    base.config.use_cache = False  # a KV cache is useless in training and conflicts with recomputation


def projection_names(model: nn.Module) -> list[str]:
    """Leaf names of the ``nn.Linear`` modules inside the decoder layers (LoRA targets)."""
    names = {name.rsplit(".", 1)[-1] for layer in decoder_layers(model)
             for name, m in layer.named_modules() if isinstance(m, nn.Linear)}
    return sorted(names)


def apply_lora(model: nn.Module, r: int, alpha: float | None = None, dropout: float = 0.0,
               targets: list[str] | None = None) -> nn.Module:
    """Wrap ``model`` with LoRA adapters of rank ``r`` on every attention and MLP projection.

    Only the adapter matrices require grad afterwards; the base weights (including embeddings and
    the LM head) are frozen. ``alpha`` defaults to ``2 r``.
    """
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=r,
        lora_alpha=alpha if alpha is not None else 2 * r,
        lora_dropout=dropout,
        target_modules=targets or projection_names(model),
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def trainable_parameter_names(model: nn.Module) -> list[str]:
    return [n for n, p in model.named_parameters() if p.requires_grad]


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counting only real tokens (0 on padding): what HF ``generate`` uses for left padding.

    Scoring must use the same positions as sampling did, or the log-probs belong to another
    distribution.
    """
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.masked_fill(attention_mask == 0, 0)
