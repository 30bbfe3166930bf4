"""Both generation backends agree on greedy tokens; seeds, stop strings and the truncation flag behave."""

from __future__ import annotations

import pytest
import torch

from lm_fixtures import needs_smollm2
from distlab.recipes.lm.chat import render_prompt
from distlab.recipes.lm.generate import eos_token_ids, generate
from distlab.recipes.lm.stops import FINISH_EOS, FINISH_LENGTH, FINISH_STOP

TINY_PROMPTS = ["abc", "x", "<|im_start|>user\nhello there, how are you?<|im_end|>\n<|im_start|>assistant\n",
                "def f(x):\n    return", "0123456789"]


def test_greedy_hf_equals_static_tiny(tiny):
    model, tok = tiny
    hf = generate(model, tok, TINY_PROMPTS, max_new_tokens=24, temperature=0, backend="hf")
    st = generate(model, tok, TINY_PROMPTS, max_new_tokens=24, temperature=0, backend="static")
    assert [c.token_ids for c in hf] == [c.token_ids for c in st]
    assert [c.text for c in hf] == [c.text for c in st]
    assert [c.finish_reason for c in hf] == [c.finish_reason for c in st]
    # the batch mixes rows ending on EOS with rows using the whole budget (the static loop drops rows)
    assert {c.finish_reason for c in st} == {FINISH_EOS, FINISH_LENGTH}


@needs_smollm2
def test_greedy_hf_equals_static_smollm2(smollm2):
    model, tok = smollm2
    prompts = [render_prompt(tok, q) for q in
               ("What is 2+2?", "Write a Python function that reverses a string.")]
    prompts.append("def fibonacci(n):")  # plain text, no template, a different length
    hf = generate(model, tok, prompts, max_new_tokens=16, temperature=0, backend="hf")
    st = generate(model, tok, prompts, max_new_tokens=16, temperature=0, backend="static")
    assert [c.token_ids for c in hf] == [c.token_ids for c in st]
    assert all(c.token_ids for c in st)


@pytest.mark.parametrize("backend", ["hf", "static"])
def test_sampling_reproducible_with_seed(tiny, backend):
    model, tok = tiny
    rng_before = torch.random.get_rng_state()
    kw = dict(max_new_tokens=12, temperature=1.0, top_p=0.9, n=3, backend=backend)
    a = generate(model, tok, TINY_PROMPTS[:2], seed=7, **kw)
    b = generate(model, tok, TINY_PROMPTS[:2], seed=7, **kw)
    c = generate(model, tok, TINY_PROMPTS[:2], seed=8, **kw)
    assert [x.token_ids for x in a] == [x.token_ids for x in b]
    assert [x.token_ids for x in a] != [x.token_ids for x in c]
    assert [x.prompt_index for x in a] == [0, 0, 0, 1, 1, 1]
    assert len({tuple(x.token_ids) for x in a[:3]}) > 1  # the n samples of one prompt differ
    assert torch.equal(torch.random.get_rng_state(), rng_before)  # the caller's RNG is untouched


def test_static_generator_argument(tiny):
    model, tok = tiny
    runs = [generate(model, tok, ["abc"], max_new_tokens=8, temperature=1.0, generator=torch.Generator().manual_seed(3))
            for _ in range(2)]
    assert runs[0][0].token_ids == runs[1][0].token_ids


@pytest.mark.parametrize("backend", ["hf", "static"])
def test_stop_string_cuts_text_and_is_not_truncated(tiny, backend):
    model, tok = tiny
    full = generate(model, tok, TINY_PROMPTS, max_new_tokens=24, temperature=0, backend=backend)
    row = next(i for i, c in enumerate(full) if c.finish_reason == FINISH_LENGTH)
    text = full[row].text
    stop = next(ch for ch in text[4:] if ch.isascii() and ch.isalnum())  # a character it produces late
    cut = generate(model, tok, TINY_PROMPTS, max_new_tokens=24, temperature=0, backend=backend,
                   stop_strings=[stop, "never-produced"])[row]
    assert cut.finish_reason == FINISH_STOP and not cut.truncated
    assert cut.text == text[: text.index(stop)] and stop not in cut.text
    assert cut.token_ids == full[row].token_ids[: len(cut.token_ids)]  # a prefix, ending on the stop's token
    assert stop in tok.decode(cut.token_ids) and stop not in tok.decode(cut.token_ids[:-1])


def test_truncation_flag(tiny):
    model, tok = tiny
    eos = eos_token_ids(model, tok)
    for c in generate(model, tok, TINY_PROMPTS, max_new_tokens=24, temperature=0):
        assert c.prompt_len == len(c.prompt_ids) > 0
        if c.truncated:
            assert c.finish_reason == FINISH_LENGTH and len(c.token_ids) == 24 and not eos & set(c.token_ids)
        else:
            assert c.finish_reason == FINISH_EOS and c.token_ids[-1] in eos and len(c.token_ids) <= 24
    short = generate(model, tok, TINY_PROMPTS, max_new_tokens=2, temperature=0)
    assert sum(c.truncated for c in short) >= 4 and all(len(c.token_ids) <= 2 for c in short)


def test_greedy_equal_when_rows_finish_early(monkeypatch):
    """Most rows end early, so the static loop drops finished rows from its cache; tokens still match."""
    from collections import Counter

    from transformers import DynamicCache

    from distlab.recipes.lm.model_source import load_causal_lm

    model, tok = load_causal_lm("tiny:llama-2l", seed=1)
    prompts = TINY_PROMPTS + ["hello", "zz top", "print(1)"]
    free = generate(model, tok, prompts, max_new_tokens=20, temperature=0)
    # Make a token most rows produce at some point an extra end-of-turn token.
    counts = Counter(t for c in free for t in set(c.token_ids))
    extra = counts.most_common(1)[0][0]
    model.generation_config.eos_token_id = [tok.eos_token_id, extra]
    selected = []
    original = DynamicCache.batch_select_indices
    monkeypatch.setattr(DynamicCache, "batch_select_indices",
                        lambda self, idx: (selected.append(idx.numel()), original(self, idx))[1])
    st = generate(model, tok, prompts, max_new_tokens=20, temperature=0, backend="static")
    hf = generate(model, tok, prompts, max_new_tokens=20, temperature=0, backend="hf")
    assert selected, "no finished rows were dropped"
    assert [c.token_ids for c in hf] == [c.token_ids for c in st]
    assert sum(c.finish_reason == FINISH_EOS for c in st) >= len(prompts) // 2


def test_generate_from_ids_matches_text_prompts(tiny):
    from distlab.recipes.lm.generate import generate_from_ids

    model, tok = tiny
    by_text = generate(model, tok, TINY_PROMPTS[:3], max_new_tokens=10, temperature=0, n=2)
    ids = [tok(p, add_special_tokens=False)["input_ids"] for p in TINY_PROMPTS[:3]]
    by_ids = generate_from_ids(model, tok, ids, max_new_tokens=10, temperature=0, n=2)
    assert [c.token_ids for c in by_ids] == [c.token_ids for c in by_text]
    assert [c.prompt_ids for c in by_ids] == [c.prompt_ids for c in by_text]
    assert [c.prompt_index for c in by_ids] == [0, 0, 1, 1, 2, 2]
