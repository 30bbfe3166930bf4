"""Tiny random-weight Llama models with an offline byte-level tokenizer, for tests and CPU smoke runs.

Tests of loading, generation and log-probabilities need a real ``transformers`` causal LM (so the
same code paths run as with SmolLM2) but must not download anything and must run in seconds on two
cores. A byte-level tokenizer needs no training data and round-trips any text exactly, which the
stop-string and decoding tests rely on.

The random weights use a larger initialisation than Llama's default (0.02) so that next-token
logits are well separated: with near-uniform logits a greedy comparison between two correct
implementations could flip on a 1e-7 rounding difference.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from distlab.errors import DistlabError

# ChatML, as SmolLM2 uses, so prompts rendered for the tiny model look like the real ones.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


@dataclass(frozen=True)
class TinyPreset:
    """Shape of a tiny Llama; the vocabulary always matches the byte tokenizer."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    max_positions: int = 1024
    init_std: float = 0.2


TINY_PRESETS: dict[str, TinyPreset] = {
    "llama-2l": TinyPreset(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128),
    "llama-4l": TinyPreset(layers=4, hidden=128, heads=4, kv_heads=2, intermediate=256),
}
DEFAULT_TINY = "llama-2l"


def byte_tokenizer():
    """A 256-byte vocabulary plus ChatML specials, wrapped as a ``PreTrainedTokenizerFast``.

    Built in memory from ``tokenizers`` primitives: no file, no hub. ``<|im_end|>`` is the EOS (what
    an instruct model emits at the end of its turn) and ``<|endoftext|>`` pads.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token="<|im_start|>",
        additional_special_tokens=list(SPECIAL_TOKENS),
        clean_up_tokenization_spaces=False,
    )
    tok.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS)})
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok


def tiny_causal_lm(preset: str, dtype: torch.dtype = torch.float32, seed: int = 0):
    """``(model, tokenizer)`` for ``tiny:<preset>``; the same seed gives the same weights everywhere."""
    from transformers import LlamaConfig, LlamaForCausalLM

    name = preset or DEFAULT_TINY
    if name not in TINY_PRESETS:
        raise DistlabError(f"unknown tiny model preset {name!r}: expected one of {', '.join(sorted(TINY_PRESETS))}")
    p = TINY_PRESETS[name]
    tok = byte_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=p.hidden,
        intermediate_size=p.intermediate,
        num_hidden_layers=p.layers,
        num_attention_heads=p.heads,
        num_key_value_heads=p.kv_heads,
        max_position_embeddings=p.max_positions,
        initializer_range=p.init_std,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):  # leave the caller's RNG stream untouched
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.to(dtype), tok
