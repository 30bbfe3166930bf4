"""The next-token rule: the exponential race draws from the softmax as multinomial does, and a model whose logits
overflow stops the rollout with a message naming the rows instead of a device assert."""

from __future__ import annotations

import copy

import pytest
import torch

from distlab.errors import DistlabError
from distlab.recipes.lm.config import SamplingConfig
from distlab.recipes.lm.rollout.generate import generate
from distlab.recipes.lm.rollout.sampling import nonfinite_rows, sample_next, top_p_filter


def test_sample_next_frequencies_match_softmax_and_top_p():
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.3, 0.4]])).expand(40_000, 4).contiguous()
    g = torch.Generator().manual_seed(0)
    freq = torch.bincount(sample_next(logits, 1.0, generator=g), minlength=4).float() / 40_000
    assert torch.allclose(freq, torch.tensor([0.1, 0.2, 0.3, 0.4]), atol=0.01), freq
    # temperature 0.5 squares the odds; top-p 0.65 keeps only the two likeliest (0.4 + 0.3 >= 0.65)
    sharp = torch.bincount(sample_next(logits, 0.5, generator=g), minlength=4).float() / 40_000
    assert torch.allclose(sharp, torch.tensor([1, 4, 9, 16]) / 30.0, atol=0.01), sharp
    kept = torch.bincount(sample_next(logits, 1.0, top_p=0.65, generator=g), minlength=4).float() / 40_000
    assert kept[:2].sum() == 0 and abs(kept[3] - 4 / 7) < 0.01, kept
    assert torch.isinf(top_p_filter(logits[:1], 0.65)[0, :2]).all()


def test_sample_next_is_seeded_and_greedy_at_zero():
    logits = torch.randn(64, 50, generator=torch.Generator().manual_seed(1))
    draw = [sample_next(logits, 1.0, generator=torch.Generator().manual_seed(5)) for _ in range(2)]
    assert torch.equal(draw[0], draw[1])
    assert torch.equal(sample_next(logits, 0.0), logits.argmax(-1))


def test_nonfinite_rows_flags_inf_and_nan_only():
    logits = torch.zeros(4, 6)
    logits[1, 2] = float("nan")
    logits[3, 0] = float("inf")
    logits[2, 5] = -1e30  # large but finite
    assert nonfinite_rows(logits).tolist() == [False, True, False, True]
    # a row of NaN still yields a token id in range, so the device never asserts
    assert 0 <= int(sample_next(torch.full((1, 6), float("nan")), 1.0)[0]) < 6


def test_overflowing_model_stops_the_rollout_naming_rows(tiny):
    model, tok = tiny
    broken = copy.deepcopy(model)
    with torch.no_grad():
        broken.lm_head.weight[7].fill_(float("nan"))  # one vocabulary row: every position's logits hold a NaN
    with pytest.raises(DistlabError, match=r"inf/NaN at decode step 0 in 2 of 2 rows: 0 \(\d+ prompt tokens\)"):
        generate(broken, tok, ["abc", "def f(x):"],
                 SamplingConfig(max_completion_length=6, temperature=1.0, backend="static"), seed=0)
    # the untouched model samples the same prompts
    assert len(generate(model, tok, ["abc", "def f(x):"],
                        SamplingConfig(max_completion_length=6, temperature=1.0, backend="static"), seed=0)) == 2
