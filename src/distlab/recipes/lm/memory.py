"""Memory model of an LM recipe's placed models, for ``distlab doctor --recipe grpo|score``.

Parameters are counted on the ``meta`` device from the model's config (nothing is loaded or
dequantised); sequences are as long as the run's longest prompt plus what it generates (the tokenizer
and task set are read, not the weights). Beyond weights, gradients and optimizer states, a model holds
what its largest phase needs: sampling (the rollouts' KV cache; a sharded model gathered), the update
(each layer's saved tensors, the casts of fp32 weights, one chunk of fp32 logits) or the optimizer step
(torch's AdamW temporary). Where our sampler keeps its cache for the run, the cache adds to the others.
It is the peak from the second step on (Adam's states appear at the first optimizer step), and
arithmetic a reader can redo; docs/benchmarks.md holds every measured row beside it.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from distlab.config import Placement, PlacementKind, wrap_of
from distlab.recipe import ModelSpec
from distlab.recipes.lm.models.parts import decoder_layers
from distlab.recipes.lm.models.placed import samples_from_a_copy
from distlab.recipes.lm.models.source import resolve_source

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def _config(source: str):
    resolved = resolve_source(source)
    if resolved.kind == "tiny":
        from distlab.recipes.lm.models.tiny import tiny_causal_lm

        return tiny_causal_lm(resolved.preset)[0].config
    if resolved.kind == "random":
        from distlab.recipes.lm.models.random_shapes import random_config

        return random_config(resolved.preset)
    from transformers import AutoConfig

    if resolved.kind == "gguf":
        return AutoConfig.from_pretrained(resolved.path.parent, gguf_file=resolved.path.name, local_files_only=True)
    return AutoConfig.from_pretrained(resolved.path, local_files_only=True)


def shape(source: str) -> dict[str, int]:
    """Parameter count and the sizes the activation estimate needs, from the config alone (a copy: ``train``'s
    memory check asks again for each setting it tries, and parsing a GGUF file's config takes a second)."""
    return dict(_shape(source))


@functools.lru_cache(maxsize=8)
def _shape(source: str) -> dict[str, int]:
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
            "intermediate": getattr(config, "intermediate_size", None) or 4 * config.hidden_size,
            "kv_width": getattr(config, "num_key_value_heads", heads) * (config.hidden_size // heads)}


def _home(cfg: Any, name: str) -> Placement:
    """Where a model's state lives: FSDP2's CPU offload keeps a trained model's weights, gradients and optimizer
    states on the host and computes on the GPU, which is what the doctor's ``offload`` placement counts."""
    settings = cfg.models[name]
    wrap = wrap_of(settings, cfg.dist)
    if settings.trainable and cfg.dist.cpu_offload and wrap == "fsdp":
        return Placement(PlacementKind.offload)
    return settings.where


def _fsdp_on_gpu(s: dict[str, int], trainable: int, held: int) -> tuple[int, int]:
    """``(while sampling, in the update)``: what a trained model FSDP2 shards (and may offload) holds on the GPU
    beyond its shard. Sampling gathers the whole model (:func:`.models.gathered`) at the width it trains in, since
    no mixed-precision policy narrows it and no autocast runs there; the update keeps the root unit (embeddings,
    final norm, head) unsharded. Counting neither put the SCoRe 3B offload row 43% under its peak (H200,
    2026-11-26); both measured offload peaks were set while sampling."""
    return (s["params"] - trainable) * held + trainable * 4, s["root"] * held


def layer_bytes_per_token(s: dict[str, int], act_width: int) -> int:
    """What one decoder layer saves for backward per token, counted from transformers' Llama/Qwen2 code under
    autocast (``saved_tensors_hooks`` on a CPU, ``tests/recipes/lm/models/test_lm_memory_spec.py`` checks it): each RMSNorm
    keeps two fp32 tensors of the (fp32) residual stream, each projection its own cast of the norm's output (five),
    attention its query, key and value at full width (grouped keys are repeated) and its output, the SwiGLU MLP
    four intermediates."""
    h, inter = s["hidden"], s["intermediate"]
    return 2 * 2 * 4 * h + act_width * (5 * h + 4 * h + 4 * inter)


def _frees_its_cache(cfg: Any) -> bool:
    """Whether sampling's KV cache is gone before the update: ``sampling.backend=hf`` (a DynamicCache per
    ``generate`` call). Every measured GRPO and SCoRe peak used it (docs/benchmarks.md); the offloaded ones were
    set while sampling and did not rise in the update."""
    return cfg.sampling.backend == "hf"


def training_prompts(cfg: Any) -> tuple[Any, list, list, list[str]]:
    """``(tokenizer, training tasks, few-shot examples, prompts)`` as the run builds them, so that the doctor counts
    the sequence lengths the run sizes its caches for (the longest prompt of the task set) instead of a guess."""
    from distlab.recipes.lm.models.source import load_tokenizer
    from distlab.recipes.lm.tasks.prompts import prompt_text
    from distlab.recipes.lm.tasks.select import task_split

    tok = load_tokenizer(cfg.model.source)
    tasks, _, few_shot = task_split(cfg.task)
    return tok, tasks, few_shot, [prompt_text(t, tok, cfg.model.prompt_mode, few_shot) for t in tasks]


def lm_specs(cfg: Any, names: list[str], rollouts: int, seq: int, samplers: tuple[str, ...] = ("policy",)
             ) -> list[ModelSpec]:
    """One spec per placed model. ``seq`` bounds a rollout's tokens (its longest prompt plus everything generated);
    a model in ``samplers`` holds the rollouts' KV cache, and a trained one its update's activations too."""
    s = shape(cfg.model.source)
    specs = []
    recompute = cfg.model.gradient_checkpointing or cfg.dist.activation_checkpointing != "none"
    # activations are stored in the autocast dtype (dist.precision), whatever the weights' dtype
    act_width = 4 if cfg.dist.precision == "fp32" else 2
    for name in names:
        settings = cfg.models[name]
        width = BYTES[settings.dtype]
        wrap = wrap_of(settings, cfg.dist)
        trainable = 0
        # weights that train stay fp32 whatever models.<name>.dtype says (placement.keep_trained_weights_fp32)
        held = 4 if settings.trainable and cfg.model.lora_r <= 0 else width
        if settings.trainable:
            trainable = cfg.model.lora_r * s["lora_unit"] if cfg.model.lora_r > 0 else s["params"]
        home = _home(cfg, name)
        gathered, root = _fsdp_on_gpu(s, trainable, held) if settings.trainable and wrap == "fsdp" else (0, 0)
        # a sharded trained model is sampled as gathered (its held width), any other from weights of its dtype
        sample_width = held if gathered else width
        kv = 2 * s["layers"] * s["kv_width"] * seq * sample_width * rollouts if name in samplers else 0
        update = step = 0
        if settings.trainable:
            tokens = seq * cfg.micro_batch_size
            layer = layer_bytes_per_token(s, act_width)
            # each block keeps its fp32 input and backward recomputes one block at a time, or every layer's tensors
            act = tokens * (s["layers"] * 4 * s["hidden"] + layer if recompute else s["layers"] * layer)
            # the bf16/fp16 casts of fp32 weights: saved for backward, or cached by autocast for the whole forward
            # (recomputing too), beside the gradients the earlier micro-batches left
            cast = (s["params"] if held == 4 else trainable) * act_width if act_width < 4 else 0
            logits = min(cfg.logprob_chunk, tokens) * s["vocab"] * 4 * 3  # one chunk of fp32 logits
            update = act + cast + logits + root
            # torch.optim.AdamW (optim.state_dtype=fp32) steps with foreach kernels: one temporary as large as the
            # trained weights (torchao's bf16/int8 steps go tensor by tensor); an offloaded model steps on the host
            step = trainable * 4 if cfg.optim.state_dtype == "fp32" and not home.offload else 0
        # transformers' generate frees its cache after each call, so there the larger phase counts; our sampler
        # keeps one StaticCache on the model for the whole run, beside the update
        phases = max(kv + gathered, update, step) if _frees_its_cache(cfg) else kv + max(gathered, update, step)
        batch = rollouts if (settings.trainable or name in samplers) else 1
        specs.append(ModelSpec(name, s["params"], trainable_params=trainable,
                               activation_bytes_per_example=-(-phases // batch), batch_per_device=batch,
                               param_dtype_bytes=held, optimizer="adamw" if trainable else "none",
                               placement=str(home), wrap=wrap))
        if samples_from_a_copy(settings.trainable, width < 4, wrap == "fsdp"):
            where = str(settings.where) if settings.where.kind == PlacementKind.cuda else "device"
            # under LoRA the copy holds only the adapters; it shares the frozen base (models.SamplingCopy)
            copied = trainable if settings.trainable and cfg.model.lora_r > 0 else s["params"]
            specs.append(ModelSpec(f"{name} (sampling copy)", copied, trainable_params=0,
                                   param_dtype_bytes=width, placement=where, optimizer="none"))
    return specs
