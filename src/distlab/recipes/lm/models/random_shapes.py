"""Language models of published shapes with random weights: ``model.source=random:qwen2.5-1.5b``.

Why: memory, step time and placement depend on a model's shape, not on what its weights learned, so the seeds'
1.5B-3B policies can be measured without downloading them (nothing here may reach a hub). The shapes are
copied from the models' published ``config.json`` files; the tokenizer is the byte-level one of the tiny test
models (259 ids, inside every vocabulary below), so prompts are about 3-4x longer in tokens than with the real
tokenizer and completions run to their length limit. For systems benchmarks only: such a model generates noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from distlab.errors import DistlabError, near_matches


@dataclass(frozen=True)
class Shape:
    model_type: str  # transformers' name: qwen2 | llama
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    rope_theta: float
    tied: bool  # input embedding and LM head share one matrix


# name -> published shape (config.json of the Hugging Face release)
SHAPES: dict[str, Shape] = {
    "qwen2.5-0.5b": Shape("qwen2", 24, 896, 14, 2, 4864, 151936, 1e6, True),
    "qwen2.5-1.5b": Shape("qwen2", 28, 1536, 12, 2, 8960, 151936, 1e6, True),
    "qwen2.5-3b": Shape("qwen2", 36, 2048, 16, 2, 11008, 151936, 1e6, True),
    "qwen2.5-7b": Shape("qwen2", 28, 3584, 28, 4, 18944, 152064, 1e6, False),
    "llama-3.2-1b": Shape("llama", 16, 2048, 32, 8, 8192, 128256, 5e5, True),
    "llama-3.2-3b": Shape("llama", 28, 3072, 24, 8, 8192, 128256, 5e5, True),
    "smollm2-135m": Shape("llama", 30, 576, 9, 3, 1536, 49152, 1e5, True),  # the CPU default's shape
}


def check_shape_name(name: str) -> Shape:
    if name not in SHAPES:
        hint = near_matches(name, SHAPES)
        raise DistlabError(f"model source 'random:{name}': no such shape; choose one of {', '.join(SHAPES)}"
                           + (f" (did you mean {hint[0]}?)" if hint else ""))
    return SHAPES[name]


def random_config(name: str):
    """The transformers config of ``name``'s shape (sdpa attention, no sliding window)."""
    from transformers import AutoConfig

    s = check_shape_name(name)
    return AutoConfig.for_model(
        s.model_type, num_hidden_layers=s.layers, hidden_size=s.hidden, num_attention_heads=s.heads,
        num_key_value_heads=s.kv_heads, intermediate_size=s.intermediate, vocab_size=s.vocab,
        rope_theta=s.rope_theta, tie_word_embeddings=s.tied, max_position_embeddings=32768,
        rms_norm_eps=1e-6, hidden_act="silu")


def _draw_device() -> torch.device:
    """Where the weights are drawn. A seeded CPU draw is single-threaded (~40M values/s: 18 s for the 1.5B shape,
    minutes for SCoRe's 3B models), so on a GPU machine they are drawn on the process's GPU and copied to the
    CPU copy the recipe places. The same seed gives the same weights on every rank of one device type."""
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def random_causal_lm(name: str, dtype: torch.dtype = torch.float32, seed: int = 0):
    """``(model, tokenizer)``: ``name``'s shape with weights drawn from ``seed`` (every rank draws the same), and
    the tiny models' byte tokenizer (built in memory, so a GPU machine needs no model file at all)."""
    from transformers import AutoModelForCausalLM

    from distlab.recipes.lm.models.tiny import byte_tokenizer

    tok = byte_tokenizer()
    config = random_config(name)
    config.eos_token_id, config.pad_token_id = tok.eos_token_id, tok.pad_token_id
    with torch.device("meta"):  # shapes only; filled below, ~2.5x faster than transformers' per-module init
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model = model.to_empty(device="cpu")
    model.tie_weights()  # to_empty gives the head a tensor of its own; tied shapes share the embedding again
    where = _draw_device()
    draw = torch.Generator(device=where).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied weights are one parameter, listed once
            if "norm" in name:
                p.fill_(1.0)
            elif name.endswith("bias"):
                p.zero_()
            elif where.type == "cpu":
                p.normal_(0.0, 0.02, generator=draw)
            else:
                p.copy_(torch.empty(p.shape, dtype=p.dtype, device=where).normal_(0.0, 0.02, generator=draw))
        rotary = model.model.rotary_emb  # its frequencies are buffers computed from the config, never drawn
        fresh = type(rotary)(config=model.config)
        for name, buf in fresh.named_buffers():
            rotary.get_buffer(name).copy_(buf)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return model, tok
