"""Evaluation generates in calls no larger than a training step's rollout: all 500 MBPP test prompts in one call
ran an H100 out of memory with Qwen-0.5B (2026-11-26), while training at the same settings fitted."""

from concurrent.futures import Future
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import distlab.recipes.lm.eval.evaluation as evaluation
from distlab.recipes.lm.config import EvalConfig, LMRecipeConfig, SamplingConfig
from distlab.recipes.lm.eval.evaluation import evaluate_pass_at_k, prompts_per_call
from distlab.runtime.dist import Runtime


def test_prompts_per_call_follows_the_step_rows_unless_set():
    assert prompts_per_call(SamplingConfig(), step_rows=64) == 64
    assert prompts_per_call(SamplingConfig(), step_rows=64, n=8) == 8  # sampled pass@k: 8 rows per prompt
    assert prompts_per_call(SamplingConfig(), step_rows=4, n=8) == 1
    assert prompts_per_call(SamplingConfig(chunk_prompts=3), step_rows=64, n=8) == 3
    cfg = LMRecipeConfig(prompts_per_step=16, num_generations=4)
    assert cfg.rows_per_rank(1) == 64 and cfg.rows_per_rank(2) == 32


@pytest.mark.parametrize("samples, calls", [(1, [4, 4, 2]), (2, [4, 4, 2, 4, 4, 4, 4, 4])])
def test_evaluation_calls_hold_at_most_a_steps_rows(monkeypatch, samples, calls):
    seen = []

    def fake_generate(model, tok, prompts, sampling, *, n, **kw):
        seen.append(len(prompts) * n)
        return [SimpleNamespace(prompt_index=i, text="") for i in range(len(prompts)) for _ in range(n)]

    def solved(task, text):
        f = Future()
        f.set_result(1.0 if int(task.task_id) % 2 else 0.0)
        return f

    monkeypatch.setattr(evaluation, "generate", fake_generate)
    monkeypatch.setattr(evaluation, "prompt_text", lambda t, tok, mode, few: f"problem {t.task_id}")
    monkeypatch.setattr(evaluation, "stops_for", lambda tasks, mode: ())
    tasks = [SimpleNamespace(task_id=str(i)) for i in range(10)]
    scorer = SimpleNamespace(mode="text", submit=solved)
    out = evaluate_pass_at_k(torch.nn.Linear(1, 1), None, tasks, [], SamplingConfig(), EvalConfig(samples=samples, ks="1"),
                             scorer, Runtime(), seed=0, step_rows=4)
    # greedy: 10 prompts in calls of 4 rows; sampled: 2 rows per prompt, so 2 prompts (4 rows) a call
    assert seen == calls
    assert out["metrics"]["pass@1"] == pytest.approx(np.mean([i % 2 for i in range(10)]))
