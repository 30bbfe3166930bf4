"""Memory model of an LM recipe's placed models, for ``distlab doctor --recipe grpo|score``.

Parameters are counted on the ``meta`` device from the model's config (nothing is loaded or
dequantised); activations are the rollouts' KV cache and the training micro-batch's activations with
one chunk of fp32 logits: their sum where the sampler keeps its cache for the run, the larger where
transformers' generate frees it after each call. It is arithmetic a reader can redo, and a lower bound.
"""

from __future__ import annotations

from typing import Any

import torch

from distlab.placement import wrap_of
from distlab.recipe import ModelSpec
from distlab.recipes.lm.model_parts import decoder_layers
from distlab.recipes.lm.model_source import resolve_source
from distlab.recipes.lm.models import samples_from_a_copy

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def _config(source: str):
    resolved = resolve_source(source)
    if resolved.kind == "tiny":
        from distlab.recipes.lm.tiny_model import tiny_causal_lm

        return tiny_causal_lm(resolved.preset)[0].config
    if resolved.kind == "random":
        from distlab.recipes.lm.random_model import random_config

        return random_config(resolved.preset)
    from transformers import AutoConfig

    if resolved.kind == "gguf":
        return AutoConfig.from_pretrained(resolved.path.parent, gguf_file=resolved.path.name, local_files_only=True)
    return AutoConfig.from_pretrained(resolved.path, local_files_only=True)


def shape(source: str) -> dict[str, int]:
    """Parameter count and the sizes the activation estimate needs, from the config alone."""
    from transformers import AutoModelForCausalLM

    config = _config(source)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    lora_unit = sum(m.in_features + m.out_features for n, m in model.named_modules()
                    if n.split(".")[-1] in PROJECTIONS and isinstance(m, torch.nn.Linear))
    heads = config.num_attention_heads
    params = sum(p.numel() for p in model.parameters())
    in_blocks = sum(p.numel() for block in decoder_layers(model) for p in block.parameters())
    return {"params": params, "root": params - in_blocks, "layers": config.num_hidden_layers,
            "hidden": config.hidden_size, "vocab": config.vocab_size, "lora_unit": lora_unit,
            "kv_width": getattr(config, "num_key_value_heads", heads) * (config.hidden_size // heads)}


def _home(cfg: Any, name: str) -> str:
    """Where a model's state lives: FSDP2's CPU offload keeps a trained model's weights, gradients and optimizer
    states on the host and computes on the GPU, which is what the doctor's ``offload`` placement counts."""
    settings = cfg.models[name]
    wrap = wrap_of(settings, cfg.dist)
    if settings.trainable and cfg.dist.cpu_offload and wrap == "fsdp":
        return "offload"
    return settings.placement


def _offloaded_on_gpu(cfg: Any, name: str, s: dict[str, int], trainable: int, act_width: int, held: int) -> int:
    """What a trained model under FSDP2's CPU offload still holds on the GPU while it samples and in its forward:
    autocast's cast of every fp32 trained weight (kept until the autocast region ends) and the root unit
    (embeddings, final norm, head: everything outside the blocks), which FSDP2 keeps unsharded at its held width.
    Counting none of it put the SCoRe 3B offload row's estimate 43% under its measured peak (H200, 2026-11-26);
    both measured offload peaks were set while sampling."""
    if _home(cfg, name) != "offload":
        return 0
    cast = trainable * act_width if act_width < 4 else 0
    return cast + s["root"] * held


def _frees_its_cache(cfg: Any) -> bool:
    """Whether sampling's KV cache is gone before the update: ``sampling.backend=hf`` (a DynamicCache per
    ``generate`` call). Every measured GRPO and SCoRe peak used it (docs/benchmarks.md); the offloaded ones were
    set while sampling and did not rise in the update."""
    return str(getattr(cfg.sampling.backend, "value", cfg.sampling.backend)) == "hf"


def lm_specs(cfg: Any, names: list[str], rollouts: int) -> list[ModelSpec]:
    """One spec per placed model; the trained policy also carries the rollouts' KV cache and activations."""
    s = shape(cfg.model.source)
    seq = cfg.sampling.max_completion_length + 512  # completion plus a typical prompt
    specs = []
    recompute = cfg.model.gradient_checkpointing or str(getattr(cfg.dist.activation_checkpointing, "value",
                                                                cfg.dist.activation_checkpointing)) != "none"
    # activations are stored in the autocast dtype (dist.precision), whatever the weights' dtype
    act_width = 4 if str(getattr(cfg.dist.precision, "value", cfg.dist.precision)) == "fp32" else 2
    for name in names:
        settings = cfg.models[name]
        width = BYTES[settings.dtype]
        wrap = wrap_of(settings, cfg.dist)
        trainable = 0
        act = 0
        # weights that train stay fp32 whatever models.<name>.dtype says (placement.keep_trained_weights_fp32)
        held = 4 if settings.trainable and cfg.model.lora_r <= 0 else width
        if settings.trainable:
            trainable = cfg.model.lora_r * s["lora_unit"] if cfg.model.lora_r > 0 else s["params"]
            kv = 2 * s["layers"] * s["kv_width"] * seq * width
            # a recomputed layer keeps only its input in backward; otherwise ~34 values per hidden unit and token
            per_layer = s["hidden"] * seq * (2 if recompute else 34)
            train_act = per_layer * s["layers"] * act_width * cfg.micro_batch_size
            logits = min(cfg.logprob_chunk, seq) * s["vocab"] * 4 * 3
            # per rollout: its KV cache while sampling and its share of one micro-batch and one logits chunk in the
            # update, plus what offload keeps; transformers' generate frees its cache after each call, so there the
            # larger phase counts, while our sampler keeps one StaticCache on the model for the whole run
            update = (train_act + logits) // rollouts
            phases = max(kv, update) if _frees_its_cache(cfg) else kv + update
            act = phases + _offloaded_on_gpu(cfg, name, s, trainable, act_width, held) // rollouts
        batch = rollouts if settings.trainable else 1
        specs.append(ModelSpec(name, s["params"], trainable_params=trainable, activation_bytes_per_example=act,
                               batch_per_device=batch, param_dtype_bytes=held,
                               optimizer="adamw" if trainable else "none",
                               placement=_home(cfg, name), wrap=wrap))
        if samples_from_a_copy(settings.trainable, width < 4, wrap == "fsdp"):
            where = settings.placement if str(settings.placement).startswith("cuda") else "device"
            specs.append(ModelSpec(f"{name} (sampling copy)", s["params"], trainable_params=0,
                                   param_dtype_bytes=width, placement=where, optimizer="none"))
    return specs

