"""padding_free: a micro-batch's sequences packed into fewer rows give the log-probs, entropies and gradients of
the padded batch (a block-diagonal causal mask keeps them apart, positions restart per sequence)."""

import pytest
import torch

from distlab.recipes.lm.batching import sequences
from distlab.recipes.lm.logprobs import pack_rows, token_logprobs
from distlab.recipes.lm.model_source import load_causal_lm

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


def test_packed_logprobs_entropies_and_gradients_equal_the_padded_ones():
    model, tok = load_causal_lm("tiny:llama-2l")
    ids, attn, comp = _batch(tok)
    grads = []
    for pack in (False, True):
        model.zero_grad()
        logp, ent = token_logprobs(model, ids, attn, comp, chunk_tokens=5, with_entropy=True, pack=pack)
        (logp.sum() + ent.sum()).backward()
        grads.append((logp.detach(), ent.detach(), [p.grad.clone() for p in model.parameters()]))
    (a, ea, ga), (b, eb, gb) = grads
    assert torch.equal(a != 0, b != 0) and int((a != 0).sum()) == int(comp.sum())
    torch.testing.assert_close(b, a, rtol=0, atol=1e-5)
    torch.testing.assert_close(eb, ea, rtol=0, atol=1e-5)
    for x, y in zip(ga, gb):
        torch.testing.assert_close(y, x, rtol=1e-4, atol=1e-4)


def _flex_pair(device: str):
    dense_model, tok = load_causal_lm("tiny:llama-2l", device=device)
    flex_model, _ = load_causal_lm("tiny:llama-2l", device=device, attn_implementation="flex_attention")
    flex_model.load_state_dict(dense_model.state_dict())
    return dense_model, flex_model, [t.to(device) for t in _batch(tok)]


def test_flex_attention_document_masks_give_the_padded_results():
    """model.attn_implementation=flex_attention packs with a BlockMask built from document ids (no dense mask).
    Forward only: FlexAttention has no backward on CPU (the gradients are compared on CUDA below)."""
    dense_model, flex_model, (ids, attn, comp) = _flex_pair("cpu")
    rows = pack_rows(attn)
    block, dense = rows.block_mask(), rows.mask[:, 0]
    assert block.shape[0] == dense.shape[0] == 3
    r, q, k = torch.meshgrid(*(torch.arange(n) for n in dense.shape), indexing="ij")
    assert torch.equal(block.mask_mod(r, 0, q, k), dense)  # the same mask at every (row, query, key)
    with torch.no_grad():
        a, ea = token_logprobs(dense_model, ids, attn, comp, chunk_tokens=5, with_entropy=True)
        b, eb = token_logprobs(flex_model, ids, attn, comp, chunk_tokens=5, with_entropy=True, pack=True)
    assert int((b != 0).sum()) == int(comp.sum())
    torch.testing.assert_close(b, a, rtol=0, atol=1e-5)
    torch.testing.assert_close(eb, ea, rtol=0, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlexAttention's backward needs a GPU")
def test_flex_attention_document_masks_give_the_padded_gradients_on_cuda():
    dense_model, flex_model, (ids, attn, comp) = _flex_pair("cuda")
    grads = []
    for model, pack in ((dense_model, False), (flex_model, True)):
        logp, ent = token_logprobs(model, ids, attn, comp, chunk_tokens=5, with_entropy=True, pack=pack)
        (logp.sum() + ent.sum()).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for x, y in zip(*grads):
        torch.testing.assert_close(y, x, rtol=1e-3, atol=1e-3)
