"""Chunked token log-probabilities equal the naive full-logits computation, values and gradients."""

from __future__ import annotations

import pytest
import torch

from distlab.recipes.lm.models.parts import position_ids_from_mask
from distlab.recipes.lm.models.source import load_causal_lm
from distlab.recipes.lm.pg.logprobs import score_mask, token_logprobs


def _batch(tok, seed: int = 0):
    """Left-padded rows of different lengths, as rollouts look."""
    g = torch.Generator().manual_seed(seed)
    lengths = [19, 12, 7]
    T = max(lengths)
    ids = torch.full((len(lengths), T), tok.pad_token_id)
    mask = torch.zeros(len(lengths), T, dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, T - n:] = torch.randint(0, 256, (n,), generator=g)
        mask[b, T - n:] = 1
    return ids, mask


def _naive(model, ids, mask, scored, temperature=1.0):
    """The obvious computation: all logits in fp32, log_softmax, gather the next tokens."""
    logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)).logits.float()
    logp_all = (logits / temperature).log_softmax(-1)[:, :-1]
    logp = logp_all.gather(-1, ids[:, 1:, None]).squeeze(-1)
    ent = -(logp_all.exp() * logp_all).sum(-1)
    zero = torch.zeros_like(logp)
    pad = lambda x: torch.nn.functional.pad(torch.where(scored[:, 1:], x, zero), (1, 0))  # noqa: E731
    return pad(logp), pad(ent)


@pytest.mark.parametrize("chunk", [1, 5, 4096])
@pytest.mark.parametrize("which", ["all", "start", "mask"])
def test_chunked_equals_naive(tiny, chunk, which):
    model, tok = tiny
    ids, mask = _batch(tok)
    completion = torch.zeros_like(mask)
    completion[:, -5:] = 1
    kw = {"all": {}, "start": {"start": 10}, "mask": {"completion_mask": completion}}[which]
    with torch.no_grad():
        logp, ent = token_logprobs(model, ids, mask, chunk_tokens=chunk, with_entropy=True, temperature=0.7, **kw)
        ref_logp, ref_ent = _naive(model, ids, mask, score_mask(mask, **kw), temperature=0.7)
    assert logp.shape == ids.shape and logp.dtype == torch.float32
    torch.testing.assert_close(logp, ref_logp, rtol=0, atol=1e-5)
    torch.testing.assert_close(ent, ref_ent, rtol=0, atol=1e-5)
    assert (logp[mask == 0] == 0).all() and (logp[:, 0] == 0).all()


def test_gradients_equal_naive(tiny):
    model, tok = tiny
    ids, mask = _batch(tok, seed=1)
    weights = torch.randn(ids.shape, generator=torch.Generator().manual_seed(2))

    def grads(fn):
        model.zero_grad(set_to_none=True)
        logp, ent = fn()
        ((logp * weights).sum() + 0.1 * ent.sum()).backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    chunked = grads(lambda: token_logprobs(model, ids, mask, start=4, chunk_tokens=7, with_entropy="grad"))
    naive = grads(lambda: _naive(model, ids, mask, score_mask(mask, start=4)))
    for name, g in naive.items():
        assert torch.isfinite(chunked[name]).all(), name
        torch.testing.assert_close(chunked[name], g, rtol=1e-4, atol=1e-5, msg=name)
    assert all(g.abs().sum() > 0 for g in chunked.values())  # every parameter receives gradient
    model.zero_grad(set_to_none=True)


def test_entropy_as_a_statistic_carries_no_gradient(tiny):
    """``with_entropy=True`` (the update's logged entropy) gives the same values and log-prob gradients as the
    naive computation, but no gradient through the entropy: the backward skips a product over the vocabulary."""
    model, tok = tiny
    ids, mask = _batch(tok, seed=4)
    weights = torch.randn(ids.shape, generator=torch.Generator().manual_seed(5))
    model.zero_grad(set_to_none=True)
    logp, ent = token_logprobs(model, ids, mask, start=4, chunk_tokens=7, with_entropy=True)
    assert logp.requires_grad and not ent.requires_grad
    (logp * weights).sum().backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    ref_logp, ref_ent = _naive(model, ids, mask, score_mask(mask, start=4))
    (ref_logp * weights).sum().backward()
    torch.testing.assert_close(ent, ref_ent.detach(), rtol=0, atol=1e-5)
    for name, p in model.named_parameters():
        torch.testing.assert_close(got[name], p.grad, rtol=1e-4, atol=1e-5, msg=name)
    model.zero_grad(set_to_none=True)


def test_gradient_checkpointing_gives_same_gradients(tiny):
    model, tok = tiny
    ids, mask = _batch(tok, seed=3)
    ckpt, _ = load_causal_lm("tiny:llama-2l", gradient_checkpointing=True)
    ckpt.train()
    out = []
    for m in (model, ckpt):
        m.zero_grad(set_to_none=True)
        token_logprobs(m, ids, mask, chunk_tokens=8)[0].sum().backward()
        out.append({n: p.grad for n, p in m.named_parameters()})
    for name in out[0]:
        torch.testing.assert_close(out[1][name], out[0][name], rtol=1e-4, atol=1e-6, msg=name)
    model.zero_grad(set_to_none=True)


def test_head_is_restored(tiny):
    model, tok = tiny
    ids, mask = _batch(tok)
    token_logprobs(model, ids, mask)
    assert "forward" not in model.lm_head.__dict__
    assert model(input_ids=ids, attention_mask=mask).logits.shape[-1] == model.config.vocab_size
