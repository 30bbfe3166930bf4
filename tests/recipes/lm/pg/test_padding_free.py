"""padding_free: a micro-batch's sequences packed into fewer rows give the log-probs, entropies and gradients of
the padded batch (a block-diagonal causal mask keeps them apart, positions restart per sequence)."""

import pytest
import torch

from distlab.recipes.lm.models.source import load_causal_lm
from distlab.recipes.lm.pg.batching import sequences
from distlab.recipes.lm.pg.logprobs import PACKING_ATTENTIONS, pack_rows, token_logprobs

pytest.importorskip("transformers")


def _batch(tok):
    g = torch.Generator().manual_seed(0)
    lengths = [(3, 9), (7, 1), (2, 12), (5, 4), (4, 6), (6, 3), (20, 20)]  # one long row, many short ones
    prompts = [torch.randint(3, 250, (p,), generator=g).tolist() for p, _ in lengths]
    comps = [torch.randint(3, 250, (c,), generator=g).tolist() for _, c in lengths]
    return sequences(prompts, comps, tok.pad_token_id, torch.device("cpu"))


def test_packing_puts_seven_rows_in_three_with_positions_restarting():
    ids = torch.ones(3, 6, dtype=torch.long)
    attn = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0]])
    rows = pack_rows(attn)
    assert rows.positions.tolist() == [[0, 1, 2, 3, 4, 5], [0, 1, 2, 0, 1, 2]]
    assert not rows.mask[1, 0, 3, 2] and rows.mask[1, 0, 4, 3]  # the second sequence never sees the first
    with pytest.raises(ValueError, match="right-padded"):
        pack_rows(torch.tensor([[0, 1, 1], [1, 1, 1]]))
    _, tok = load_causal_lm("tiny:llama-2l")
    assert pack_rows(_batch(tok)[1]).positions.shape[0] == 3


def _pair(attn: str, device: str = "cpu"):
    """The padded reference (sdpa) and the same weights under ``attn``, with the test batch on ``device``."""
    reference, tok = load_causal_lm("tiny:llama-2l", device=device, attn_implementation="sdpa")
    model, _ = load_causal_lm("tiny:llama-2l", device=device, attn_implementation=attn)
    model.load_state_dict(reference.state_dict())
    return reference, model, [t.to(device) for t in _batch(tok)]


def _reference_flex(query, key, value, training=False, **kwargs):
    """transformers' FlexAttention call without ``torch.compile``: torch's own reference path in plain aten ops."""
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(query, key, value, **kwargs)


@pytest.fixture
def uncompiled_flex(monkeypatch):
    """On the CPU, transformers compiles every FlexAttention call with inductor's C++ flex template. That kernel
    gave different wrong log-probs in 3 of 3 pytest runs of the review (4 values off by up to 0.61 once, NaNs once)
    and right ones outside pytest; we could not reproduce it (fresh and shared inductor caches, 1-16 threads,
    compile and run at different thread counts, 80+ calls), so it is torch's kernel, not the mask. The CPU never
    trains with flex (refused: no backward there), so the CPU test checks what is ours, the ``BlockMask`` and its
    document ids, through torch's uncompiled path (deterministic); the compiled kernel is tested on CUDA below."""
    import transformers.integrations.flex_attention as hf_flex

    monkeypatch.setattr(hf_flex, "compile_friendly_flex_attention", _reference_flex)


@pytest.mark.parametrize("attn", PACKING_ATTENTIONS)
def test_packed_logprobs_entropies_and_gradients_equal_the_padded_ones(attn, uncompiled_flex):
    """Every attention padding_free admits gives the padded batch's per-token log-probs and entropies (eager takes
    an additive float mask: a bool one is *added* to its scores and masks nothing), and its gradients where the CPU
    has a backward (not FlexAttention's)."""
    reference, model, (ids, attn_mask, comp) = _pair(attn)
    backward = attn != "flex_attention"
    out = []
    for net, pack in ((reference, False), (model, True)):
        with torch.set_grad_enabled(backward):
            logp, ent = token_logprobs(net, ids, attn_mask, comp, chunk_tokens=5, with_entropy=True, pack=pack)
            if backward:
                (logp.sum() + ent.sum()).backward()
        out.append((logp.detach(), ent.detach(), [p.grad for p in net.parameters()]))
    (a, ea, ga), (b, eb, gb) = out
    assert int((a != 0).sum()) == int((b != 0).sum()) == int(comp.sum()) == 55
    torch.testing.assert_close(b, a, rtol=0, atol=1e-5)
    torch.testing.assert_close(eb, ea, rtol=0, atol=1e-5)
    for x, y in zip(ga, gb):
        if backward:
            torch.testing.assert_close(y, x, rtol=1e-4, atol=1e-4)


def test_eager_mask_is_additive_and_the_sdpa_mask_boolean():
    rows = pack_rows(torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]))
    eager, sdpa = rows.attention_mask("eager"), rows.attention_mask("sdpa")
    assert sdpa.dtype == torch.bool and eager.dtype == torch.float32
    assert torch.equal(eager == 0, sdpa)  # 0 where attended, the most negative finite value elsewhere
    assert bool((eager[~sdpa] == torch.finfo(torch.float32).min).all()) and torch.isfinite(eager).all()
    assert rows.attention_mask("grouped_sdpa").dtype == torch.bool
    assert rows.additive_mask(torch.bfloat16).dtype == torch.bfloat16


def test_flex_attention_block_mask_is_the_dense_mask_and_deterministic(uncompiled_flex):
    """model.attn_implementation=flex_attention packs with a BlockMask built from document ids (no dense mask):
    the same mask at every (row, query, key), and two passes give bitwise the same log-probs."""
    _, flex_model, (ids, attn, comp) = _pair("flex_attention")
    rows = pack_rows(attn)
    block, dense = rows.block_mask(), rows.mask[:, 0]
    assert block.shape[0] == dense.shape[0] == 3
    r, q, k = torch.meshgrid(*(torch.arange(n) for n in dense.shape), indexing="ij")
    assert torch.equal(block.mask_mod(r, 0, q, k), dense)
    with torch.no_grad():
        first, second = (token_logprobs(flex_model, ids, attn, comp, chunk_tokens=5, pack=True)[0] for _ in range(2))
    assert torch.equal(first, second)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled kernels and flex's backward need a GPU")
@pytest.mark.parametrize("attn", PACKING_ATTENTIONS)
def test_packed_logprobs_and_gradients_equal_the_padded_ones_on_cuda(attn):
    """The compiled kernels (FlexAttention's included) on the GPU, forward and backward."""
    reference, model, (ids, attn_mask, comp) = _pair(attn, "cuda")
    out = []
    for net, pack in ((reference, False), (model, True)):
        logp, ent = token_logprobs(net, ids, attn_mask, comp, chunk_tokens=5, with_entropy=True, pack=pack)
        (logp.sum() + ent.sum()).backward()
        out.append((logp.detach(), [p.grad.clone() for p in net.parameters()]))
    (a, ga), (b, gb) = out
    torch.testing.assert_close(b, a, rtol=0, atol=1e-4)
    for x, y in zip(ga, gb):
        torch.testing.assert_close(y, x, rtol=1e-3, atol=1e-3)
