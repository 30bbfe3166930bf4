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
