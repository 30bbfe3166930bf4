"""The old policy's log-probs are taken under the trained pass's autocast: the first ratio is exactly 1.

Scored outside autocast (fp32) and trained inside it (bf16), the same weights gave ratios off 1 at iteration 0,
so clipping acted on an update that had not happened yet.
"""

import pytest
import torch

pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")

from distlab.recipes.lm.models.source import load_causal_lm  # noqa: E402
from distlab.recipes.lm.pg.logprobs import logprobs  # noqa: E402
from distlab.recipes.lm.pg.update import frozen_logprobs  # noqa: E402


class _Bf16Session:
    def autocast(self):
        return torch.autocast("cpu", dtype=torch.bfloat16)


def test_first_iteration_ratio_is_one_under_bf16_autocast():
    model, _ = load_causal_lm("tiny:llama-2l", seed=0)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 200, (4, 20), generator=g)
    attn = torch.ones_like(ids)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, 8:] = True
    slices = [slice(0, 2), slice(2, 4)]
    session = _Bf16Session()
    old = frozen_logprobs(session, model, ids, attn, mask, slices, chunk_tokens=64, temperature=1.0,
                          device=torch.device("cpu"))
    for sl, o in zip(slices, old):
        with session.autocast():
            live, _ = logprobs(model, ids[sl], attn[sl], mask[sl], chunk_tokens=64)
        assert torch.equal(torch.exp(live.detach() - o)[mask[sl]], torch.ones(int(mask[sl].sum())))
        outside, _ = logprobs(model, ids[sl], attn[sl], mask[sl], chunk_tokens=64)  # what the old code compared
        assert (torch.exp(live.detach() - outside)[mask[sl]] - 1).abs().max() > 1e-3
