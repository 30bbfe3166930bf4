"""Both generation backends agree on greedy tokens; seeds, stop strings and the truncation flag behave; prefix
sharing and a fixed static-cache shape change no token."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from lm_fixtures import needs_smollm2
from distlab.errors import DistlabError
from distlab.recipes.lm.config import SamplingConfig
from distlab.recipes.lm.rollout.generate import eos_token_ids, generate
from distlab.recipes.lm.rollout.stops import FINISH_EOS, FINISH_LENGTH, FINISH_STOP
from distlab.recipes.lm.tasks.prompts import render_prompt

TINY_PROMPTS = ["abc", "x", "<|im_start|>user\nhello there, how are you?<|im_end|>\n<|im_start|>assistant\n",
                "def f(x):\n    return", "0123456789"]


def test_greedy_hf_equals_static_tiny(tiny):
    model, tok = tiny
    hf = generate(model, tok, TINY_PROMPTS, SamplingConfig(max_completion_length=24, temperature=0, backend="hf"))
    st = generate(model, tok, TINY_PROMPTS, SamplingConfig(max_completion_length=24, temperature=0, backend="static"))
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
    hf = generate(model, tok, prompts, SamplingConfig(max_completion_length=16, temperature=0, backend="hf"))
    st = generate(model, tok, prompts, SamplingConfig(max_completion_length=16, temperature=0, backend="static"))
    assert [c.token_ids for c in hf] == [c.token_ids for c in st]
    assert all(c.token_ids for c in st)


@pytest.mark.parametrize("backend", ["hf", "static"])
def test_sampling_reproducible_with_seed(tiny, backend):
    model, tok = tiny
    rng_before = torch.random.get_rng_state()
    kw = dict(sampling=SamplingConfig(max_completion_length=12, temperature=1.0, top_p=0.9, backend=backend), n=3)
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
    runs = [generate(model, tok, ["abc"], SamplingConfig(max_completion_length=8, temperature=1.0),
                     generator=torch.Generator().manual_seed(3))
            for _ in range(2)]
    assert runs[0][0].token_ids == runs[1][0].token_ids


@pytest.mark.parametrize("backend", ["hf", "static"])
def test_stop_string_cuts_text_and_is_not_truncated(tiny, backend):
    model, tok = tiny
    full = generate(model, tok, TINY_PROMPTS, SamplingConfig(max_completion_length=24, temperature=0, backend=backend))
    row = next(i for i, c in enumerate(full) if c.finish_reason == FINISH_LENGTH)
    text = full[row].text
    stop = next(ch for ch in text[4:] if ch.isascii() and ch.isalnum())  # a character it produces late
    cut = generate(model, tok, TINY_PROMPTS, SamplingConfig(max_completion_length=24, temperature=0, backend=backend),
                   stop_strings=[stop, "never-produced"])[row]
    assert cut.finish_reason == FINISH_STOP and not cut.truncated
    assert cut.text == text[: text.index(stop)] and stop not in cut.text
    assert cut.token_ids == full[row].token_ids[: len(cut.token_ids)]  # a prefix, ending on the stop's token
    assert stop in tok.decode(cut.token_ids) and stop not in tok.decode(cut.token_ids[:-1])


def test_truncation_flag(tiny):
    model, tok = tiny
    eos = eos_token_ids(model, tok)
    for c in generate(model, tok, TINY_PROMPTS, SamplingConfig(max_completion_length=24, temperature=0)):
        assert c.prompt_len == len(c.prompt_ids) > 0
        if c.truncated:
            assert c.finish_reason == FINISH_LENGTH and len(c.token_ids) == 24 and not eos & set(c.token_ids)
        else:
            assert c.finish_reason == FINISH_EOS and c.token_ids[-1] in eos and len(c.token_ids) <= 24
    short = generate(model, tok, TINY_PROMPTS, SamplingConfig(max_completion_length=2, temperature=0))
    assert sum(c.truncated for c in short) >= 4 and all(len(c.token_ids) <= 2 for c in short)


def test_greedy_equal_when_rows_finish_early(monkeypatch):
    """Most rows end early, so the static loop drops finished rows from its cache; tokens still match."""
    from collections import Counter

    from transformers import DynamicCache

    from distlab.recipes.lm.models.source import load_causal_lm

    model, tok = load_causal_lm("tiny:llama-2l", seed=1)
    prompts = TINY_PROMPTS + ["hello", "zz top", "print(1)"]
    free = generate(model, tok, prompts, SamplingConfig(max_completion_length=20, temperature=0))
    # Make a token most rows produce at some point an extra end-of-turn token.
    counts = Counter(t for c in free for t in set(c.token_ids))
    extra = counts.most_common(1)[0][0]
    model.generation_config.eos_token_id = [tok.eos_token_id, extra]
    selected = []
    original = DynamicCache.batch_select_indices
    monkeypatch.setattr(DynamicCache, "batch_select_indices",
                        lambda self, idx: (selected.append(idx.numel()), original(self, idx))[1])
    st = generate(model, tok, prompts, SamplingConfig(max_completion_length=20, temperature=0, backend="static"))
    hf = generate(model, tok, prompts, SamplingConfig(max_completion_length=20, temperature=0, backend="hf"))
    assert selected, "no finished rows were dropped"
    assert [c.token_ids for c in hf] == [c.token_ids for c in st]
    assert sum(c.finish_reason == FINISH_EOS for c in st) >= len(prompts) // 2


def test_token_id_prompts_match_text_prompts(tiny):
    """Prompts given as token ids (a multi-turn episode) sample what their texts do, through the one entry."""
    model, tok = tiny
    by_text = generate(model, tok, TINY_PROMPTS[:3], SamplingConfig(max_completion_length=10, temperature=0), n=2)
    ids = [tok(p, add_special_tokens=False)["input_ids"] for p in TINY_PROMPTS[:3]]
    by_ids = generate(model, tok, ids, SamplingConfig(max_completion_length=10, temperature=0), n=2)
    assert [c.token_ids for c in by_ids] == [c.token_ids for c in by_text]
    assert [c.prompt_ids for c in by_ids] == [c.prompt_ids for c in by_text]
    assert [c.prompt_index for c in by_ids] == [0, 0, 1, 1, 2, 2]


def test_the_sampling_settings_are_read_from_the_config(tiny):
    """One ``SamplingConfig`` carries what every call site used to unpack by hand: its length, temperature, backend
    and row compaction; greedy ignores ``top_p``, so a greedy evaluation needs no rule of its own for it."""
    model, tok = tiny
    greedy = SamplingConfig(max_completion_length=3, temperature=0, top_p=0.5, backend="hf")
    out = generate(model, tok, TINY_PROMPTS, greedy)
    assert all(len(c.token_ids) <= 3 for c in out) and sum(c.truncated for c in out) >= 4
    plain = generate(model, tok, TINY_PROMPTS, replace(greedy, top_p=1.0, backend="static"))
    assert [c.token_ids for c in out] == [c.token_ids for c in plain]
    with pytest.raises(DistlabError, match="unknown generation backend 'vllm'"):
        generate(model, tok, TINY_PROMPTS, replace(greedy, backend="vllm"))
    with pytest.raises(DistlabError, match="sampling.max_completion_length must be >= 1"):
        generate(model, tok, TINY_PROMPTS, replace(greedy, max_completion_length=0))


def test_prompts_are_texts_or_token_ids_not_both(tiny):
    model, tok = tiny
    greedy = SamplingConfig(max_completion_length=2, temperature=0)
    with pytest.raises(DistlabError, match="not a mix of both"):
        generate(model, tok, ["abc", [97, 98]], greedy)
    with pytest.raises(DistlabError, match="not one string"):
        generate(model, tok, "abc", greedy)
    assert generate(model, tok, [], greedy) == []


def test_no_call_site_unpacks_the_sampling_settings():
    """Every caller in the package passes its ``SamplingConfig`` (or a ``replace`` of it), never its fields."""
    import ast
    from pathlib import Path

    import distlab

    unpacked = {"max_new_tokens", "temperature", "top_p", "backend", "compact_rows"}
    found = []
    for path in Path(distlab.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("generate", "generate_from_ids")
                    and unpacked & {k.arg for k in node.keywords}):
                found.append(f"{path.name}:{node.lineno}")
    assert found == []


# --- prefix sharing and a fixed static-cache shape (issue 29) -------------------------------------------

CACHE_PATHS = ["dynamic", "static"]


@pytest.fixture
def cache_path(request, tiny, monkeypatch):
    """``compile`` value selecting the DynamicCache path or the StaticCache path of the ``static`` backend.

    On CPU the StaticCache path runs its decode step eagerly (the step torch.compile would capture), which
    exercises the same cache handling without a compiler; the cache kept on the model is dropped afterwards.
    """
    from distlab.recipes.lm.rollout import generate as gen
    model, _ = tiny
    if request.param == "static":
        def eager_step(m):
            key = gen.cache_keyword(m)
            return lambda tok, pos, mask, cache: m(input_ids=tok, attention_mask=mask, position_ids=pos,
                                                   use_cache=True, **{key: cache}).logits[:, -1]

        monkeypatch.setattr(gen, "_compiled_decode_step", eager_step)
    yield request.param == "static"
    model.__dict__.pop("_distlab_static_cache", None)


@pytest.fixture
def forward_rows(tiny):
    """Batch rows of every forward call of the tiny model, in order (the first of a call is its prefill)."""
    model, _ = tiny
    rows: list[tuple[int, int]] = []
    handle = model.register_forward_pre_hook(
        lambda mod, args, kwargs: rows.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    yield rows
    handle.remove()


@pytest.fixture
def sampled_logits(monkeypatch):
    """The logits of every token the static loop samples, in order (the first of a call is its first token)."""
    from distlab.recipes.lm.rollout import generate as gen
    seen: list[torch.Tensor] = []
    original = gen.sample_next

    def spy(logits, *args, **kwargs):
        seen.append(logits.clone())
        return original(logits, *args, **kwargs)

    monkeypatch.setattr(gen, "sample_next", spy)
    return seen


def _prefill_rows(forward_rows: list[tuple[int, int]]) -> int:
    """Rows of the latest generate call's prefill (its first forward); the record starts afresh."""
    rows = forward_rows[0][0]
    forward_rows.clear()
    return rows


def _first_token_logprobs(sampled_logits: list[torch.Tensor]) -> torch.Tensor:
    """[B, V] log-probs of the latest generate call's first token; the record starts afresh."""
    first = sampled_logits[0].log_softmax(-1)
    sampled_logits.clear()
    return first


@pytest.mark.parametrize("cache_path", CACHE_PATHS, indirect=True)
def test_shared_prefix_greedy_equals_unshared(tiny, cache_path, forward_rows):
    model, tok = tiny
    kw = dict(sampling=SamplingConfig(max_completion_length=24, temperature=0), n=3, compile=cache_path)
    unshared = generate(model, tok, TINY_PROMPTS, share_prefix=False, **kw)
    assert _prefill_rows(forward_rows) == 15
    shared = generate(model, tok, TINY_PROMPTS, **kw)
    assert _prefill_rows(forward_rows) == 5  # one prefill row per distinct prompt
    assert [c.token_ids for c in shared] == [c.token_ids for c in unshared]
    assert [c.finish_reason for c in shared] == [c.finish_reason for c in unshared]
    assert [c.prompt_index for c in shared] == [i // 3 for i in range(15)]
    # and the same tokens as one greedy row per prompt
    single = generate(model, tok, TINY_PROMPTS, SamplingConfig(max_completion_length=24, temperature=0),
                      compile=cache_path)
    assert [c.token_ids for c in shared[::3]] == [c.token_ids for c in single]


@pytest.mark.parametrize("cache_path", CACHE_PATHS, indirect=True)
def test_shared_prefix_sampling_matches_unshared(tiny, cache_path, forward_rows, sampled_logits):
    model, tok = tiny
    prompts = TINY_PROMPTS[:3]
    kw = dict(sampling=SamplingConfig(max_completion_length=12, temperature=1.0, top_p=0.95), n=4, seed=11,
              compile=cache_path)
    unshared = generate(model, tok, prompts, share_prefix=False, **kw)
    assert _prefill_rows(forward_rows) == 12
    lp_unshared = _first_token_logprobs(sampled_logits)
    shared = generate(model, tok, prompts, **kw)
    assert _prefill_rows(forward_rows) == 3
    lp_shared = _first_token_logprobs(sampled_logits)
    assert lp_shared.shape == lp_unshared.shape == (12, lp_shared.shape[1])
    assert (lp_shared - lp_unshared).abs().max().item() < 1e-5
    first_tokens = torch.tensor([c.token_ids[0] for c in unshared])
    assert [c.token_ids[0] for c in shared] == first_tokens.tolist()
    chosen = lp_shared.gather(1, first_tokens[:, None]).squeeze(1)
    assert torch.allclose(chosen, lp_unshared.gather(1, first_tokens[:, None]).squeeze(1), atol=1e-5)
    assert [c.token_ids for c in shared] == [c.token_ids for c in unshared]
    for p in range(len(prompts)):  # the G rows of one prompt share a prefill but draw their own tokens
        assert len({tuple(c.token_ids) for c in shared[4 * p:4 * p + 4]}) > 1


@pytest.mark.parametrize("cache_path", CACHE_PATHS, indirect=True)
def test_no_duplicate_prompts_prefill_unchanged(tiny, cache_path, forward_rows, sampled_logits):
    model, tok = tiny
    kw = dict(sampling=SamplingConfig(max_completion_length=16, temperature=1.0), seed=5, compile=cache_path)
    off = generate(model, tok, TINY_PROMPTS, share_prefix=False, **kw)
    off_forwards, off_logits = list(forward_rows), list(sampled_logits)
    forward_rows.clear()
    sampled_logits.clear()
    on = generate(model, tok, TINY_PROMPTS, **kw)
    assert forward_rows == off_forwards and forward_rows[0][0] == len(TINY_PROMPTS)
    assert len(sampled_logits) == len(off_logits) and all(map(torch.equal, sampled_logits, off_logits))
    assert [c.token_ids for c in on] == [c.token_ids for c in off]


def test_duplicates_found_anywhere_in_the_batch(tiny, forward_rows):
    """Sharing needs no argument: repeated prompts that are not adjacent (or come as ids) are found too."""
    from distlab.recipes.lm.rollout.generate import distinct_prompts

    assert distinct_prompts([[1, 2], [3], [1, 2], [1], [3]]) == ([0, 1, 3], [0, 1, 0, 2, 1])
    model, tok = tiny
    prompts = ["abc", "x", "abc", "0123456789", "x"]
    shared = generate(model, tok, prompts, SamplingConfig(max_completion_length=10, temperature=0))
    assert _prefill_rows(forward_rows) == 3
    ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    by_ids = generate(model, tok, ids, SamplingConfig(max_completion_length=10, temperature=0), n=2)
    assert _prefill_rows(forward_rows) == 3
    single = generate(model, tok, ["abc", "x", "0123456789"], SamplingConfig(max_completion_length=10, temperature=0))
    expected = [single[i].token_ids for i in (0, 1, 0, 2, 1)]
    assert [c.token_ids for c in shared] == expected
    assert [c.token_ids for c in by_ids] == [t for t in expected for _ in range(2)]


LONG_PROMPT = "0123456789" * 15  # 150 tokens with the tiny byte-level tokenizer


@pytest.mark.parametrize("cache_path", ["static"], indirect=True)
def test_fixed_cache_shape_reuses_one_static_cache(tiny, cache_path):
    from distlab.recipes.lm.rollout.generate import STATIC_LENGTH_BUCKET, max_prompt_tokens

    model, tok = tiny
    short, long = ["abc", "x"], [LONG_PROMPT, "def f(x):\n    return", "x"]
    longest = max_prompt_tokens(tok, short + long)
    assert longest == 150
    held = lambda: model.__dict__["_distlab_static_cache"]  # noqa: E731
    kw = dict(sampling=SamplingConfig(max_completion_length=8, temperature=0), n=2, compile=True)

    generate(model, tok, short, **kw)
    key_short, cache_short = held()
    generate(model, tok, long, **kw)
    assert held()[0] != key_short  # unfixed: each call's own (rows, length), a recompilation on a GPU
    assert key_short[:2] == (4, STATIC_LENGTH_BUCKET) and held()[0][:2] == (6, 2 * STATIC_LENGTH_BUCKET)

    fixed = dict(kw, max_prompt_length=longest, batch_rows=6)
    a = generate(model, tok, short, **fixed)
    key, cache = held()
    b = generate(model, tok, long, **fixed)
    assert held()[0] == key == (6, 2 * STATIC_LENGTH_BUCKET, key_short[2], key_short[3])
    assert held()[1] is cache
    # the padding rows are invisible and the tokens are those of the dynamic-cache path
    assert len(a) == 4 and len(b) == 6
    ref = generate(model, tok, short + long, SamplingConfig(max_completion_length=8, temperature=0), n=2, compile=False)
    assert [c.token_ids for c in a + b] == [c.token_ids for c in ref]
    assert [c.prompt_index for c in b] == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("cache_path", ["static"], indirect=True)
def test_fixed_cache_shape_exceeded_warns_and_still_runs(tiny, cache_path, caplog):
    model, tok = tiny
    kw = dict(sampling=SamplingConfig(max_completion_length=8, temperature=0), compile=True)
    with caplog.at_level("WARNING", logger="distlab"):
        out = generate(model, tok, [LONG_PROMPT, "x", "abc"], max_prompt_length=20, batch_rows=2, **kw)
    assert "exceeds max_prompt_length=20" in caplog.text and "exceed batch_rows=2" in caplog.text
    assert model.__dict__["_distlab_static_cache"][0][:2] == (3, 256)
    ref = generate(model, tok, [LONG_PROMPT, "x", "abc"], SamplingConfig(max_completion_length=8, temperature=0),
                   compile=False)
    assert [c.token_ids for c in out] == [c.token_ids for c in ref]
    with pytest.raises(DistlabError, match="batch_rows must be >= 1"):
        generate(model, tok, ["x"], batch_rows=0, **kw)


EARLY_AND_LATE = ["ab", "a", "abc", "abc\n", "yes", "b"]  # the tiny model ends these after 2, 10, 11, 13, 30, never


@pytest.mark.parametrize("cache_path", ["static"], indirect=True)
def test_compacted_rows_change_no_greedy_token(tiny, cache_path, forward_rows, monkeypatch):
    """``compact_rows``: once most rows have finished, the rest decode on a cache of half as many rows (24 -> 12
    -> 6 here); at temperature 0 every token, length and finish reason is what the full batch gives."""
    from distlab.recipes.lm.rollout import generate as gen
    model, tok = tiny
    monkeypatch.setattr(gen, "COMPACT_MIN_ROWS", 2)
    greedy = SamplingConfig(max_completion_length=40, temperature=0)
    compacting = replace(greedy, compact_rows=True)
    kw = dict(n=4, compile=cache_path)
    full = generate(model, tok, EARLY_AND_LATE, greedy, **kw)
    assert {rows for rows, _ in forward_rows[1:]} == {24}
    forward_rows.clear()
    compact = generate(model, tok, EARLY_AND_LATE, compacting, **kw)
    decoded = [rows for rows, _ in forward_rows[1:]]
    assert decoded[0] == 24 and {12, 6} <= set(decoded) and decoded == sorted(decoded, reverse=True)
    assert [c.token_ids for c in compact] == [c.token_ids for c in full]
    assert [c.finish_reason for c in compact] == [c.finish_reason for c in full]
    assert [len(c.token_ids) for c in full][::4] == [2, 10, 11, 13, 30, 40]
    # the smaller caches stay on the model for the next call, and go when the main cache's shape changes
    assert {k[0] for k in model.__dict__["_distlab_compact_caches"]} == {12, 6}
    again = generate(model, tok, EARLY_AND_LATE, compacting, **kw)
    assert [c.token_ids for c in again] == [c.token_ids for c in full]
    generate(model, tok, EARLY_AND_LATE[:2], compacting, **kw)
    assert {k[0] for k in model.__dict__.get("_distlab_compact_caches", {})} <= {4, 2}
    model.__dict__.pop("_distlab_compact_caches", None)


def test_compaction_keeps_live_rows_in_order_and_fills_with_a_finished_row():
    from distlab.recipes.lm.rollout.generate import compacted_rows, compaction_index

    assert compacted_rows(512, 300) == 512 and compacted_rows(512, 256) == 256 and compacted_rows(512, 3) == 8
    assert compacted_rows(24, 8) == 12 and compacted_rows(8, 0) == 8
    finished = torch.tensor([True, False, True, False, True, True, True, True])
    assert compaction_index(finished, 4).tolist() == [1, 3, 0, 0]
