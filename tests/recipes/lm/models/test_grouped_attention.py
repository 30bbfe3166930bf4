"""``grouped_sdpa`` computes what transformers' ``sdpa`` computes, and its decode steps read K/V as cached (one
head per key/value group) instead of a copy expanded to every query head."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from distlab.recipes.lm.config import SamplingConfig
from distlab.recipes.lm.models.attention import GROUPED_SDPA
from distlab.recipes.lm.models.source import load_causal_lm
from distlab.recipes.lm.rollout.generate import generate

PROMPTS = ["abc", "def f(x):\n    return", "0123456789 0123456789", "x"]  # lengths differ: left padding


def _model(impl: str):
    model, tok = load_causal_lm("tiny:llama-2l", attn_implementation=impl, seed=3)
    return model.eval(), tok


def _record_sdpa(monkeypatch) -> list[tuple[int, int]]:
    """(query rows, key heads) of every SDPA call."""
    calls: list[tuple[int, int]] = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, *a, **kw):
        calls.append((q.shape[-2], k.shape[1]))
        return real(q, k, v, *a, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    return calls


def test_default_attention_is_grouped():
    model, _ = load_causal_lm("tiny:llama-2l")
    assert model.config._attn_implementation == GROUPED_SDPA


@pytest.mark.parametrize("backend", ["static", "hf"])
def test_grouped_decode_logits_equal_sdpa(backend):
    """Same greedy tokens and the same per-step logits (float rounding) as transformers' sdpa, padding included."""
    outs = {}
    for impl in ("sdpa", GROUPED_SDPA):
        model, tok = _model(impl)
        outs[impl] = generate(model, tok, PROMPTS,
                              SamplingConfig(max_completion_length=12, temperature=0, backend=backend), compile=False)
    assert [c.token_ids for c in outs["sdpa"]] == [c.token_ids for c in outs[GROUPED_SDPA]]
    model_a, tok = _model("sdpa")
    model_b, _ = _model(GROUPED_SDPA)
    batch = tok(PROMPTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        a = model_a.generate(**batch, max_new_tokens=8, do_sample=False, output_scores=True,
                             return_dict_in_generate=True, pad_token_id=tok.pad_token_id)
        b = model_b.generate(**batch, max_new_tokens=8, do_sample=False, output_scores=True,
                             return_dict_in_generate=True, pad_token_id=tok.pad_token_id)
    for sa, sb in zip(a.scores, b.scores):
        torch.testing.assert_close(sa, sb, rtol=1e-5, atol=1e-5)


def test_decode_steps_read_kv_heads_not_copies(monkeypatch):
    """The tiny model has 4 query heads over 2 key/value heads: a decode step's SDPA sees 2 key heads with the
    2 query heads of each group as its query rows; transformers' sdpa, as it runs inside our compiled decode
    step (where its own one-token shortcut, if this release has one, is off), expands K/V to 4 heads."""
    import transformers.integrations.sdpa_attention as hf_sdpa

    seen = {}
    for impl in ("sdpa", GROUPED_SDPA):
        model, tok = _model(impl)
        calls = _record_sdpa(monkeypatch)
        monkeypatch.setattr(hf_sdpa, "is_torchdynamo_compiling", lambda: True, raising=False)
        generate(model, tok, PROMPTS[:2], SamplingConfig(max_completion_length=5, temperature=0, backend="static"),
                 compile=False)
        monkeypatch.undo()
        seen[impl] = calls
    heads = model.config.num_attention_heads
    kv_heads = model.config.num_key_value_heads
    assert (heads, kv_heads) == (4, 2)
    decode_sdpa = [c for c in seen["sdpa"] if c[0] == 1]
    decode_grouped = [c for c in seen[GROUPED_SDPA] if c[0] == heads // kv_heads]
    assert decode_sdpa and all(k == heads for _, k in decode_sdpa)
    assert decode_grouped and all(k == kv_heads for _, k in decode_grouped)
    assert len(decode_grouped) == len(decode_sdpa)
    # prefill (more than one query position) goes to transformers' sdpa unchanged
    prefill = [c for c in seen[GROUPED_SDPA] if c[0] > heads // kv_heads]
    assert prefill and all(k == heads for _, k in prefill)


def test_training_pass_unchanged():
    """A full-sequence forward and backward (the update's pass) gives the same loss and gradients."""
    grads = {}
    for impl in ("sdpa", GROUPED_SDPA):
        model, tok = _model(impl)
        model.train()
        batch = tok(PROMPTS, return_tensors="pt", padding=True)
        out = model(**batch, labels=batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100))
        out.loss.backward()
        grads[impl] = (out.loss.detach(), [p.grad.clone() for p in model.parameters()])
    torch.testing.assert_close(grads["sdpa"][0], grads[GROUPED_SDPA][0], rtol=0, atol=0)
    for ga, gb in zip(grads["sdpa"][1], grads[GROUPED_SDPA][1]):
        torch.testing.assert_close(ga, gb, rtol=0, atol=0)
