"""The two harnesses' judging in the real sandbox: EvalPlus's float tolerance and its time budget per problem pass
what ``distlab``'s exact asserts and fixed limit fail; exact built-in types are still required by both (a residual
difference from EvalPlus, which compares any value with ``==``)."""

from __future__ import annotations

import pytest

from distlab.recipes.lm.harnesses.evalplus import REFERENCE_TIMES, judging
from distlab.recipes.lm.harnesses.evalplus_judge import ReferenceTimes, time_limit
from distlab.recipes.lm.rewards.scorer import RewardScorer
from distlab.recipes.lm.tasks import Task
from distlab.sandbox import SandboxConfig


@pytest.fixture(scope="module")
def scorer():
    s = RewardScorer(SandboxConfig(workers=2, timeout_s=1.0), "chat")
    yield s
    s.close()


def _task(tests: str, solution: str = "", task_id: str = "mbpp-sanitized/901", entry: str = "f") -> Task:
    return Task(task_id, "Write f.", entry, tests, "", "mbpp-sanitized", solution)


def _both(scorer: RewardScorer, task: Task, reply: str) -> tuple[float, float]:
    """(distlab's reward, evalplus's reward) for one chat reply."""
    return (scorer.verdict(task, reply).reward, scorer.verdict(task, reply, judging(direct=False)).reward)


def test_a_float_off_by_rounding_passes_evalplus_tolerance_only(scorer):
    task = _task("assert f(1.0) == 1.2\nassert f(0.1) == 0.3\nassert f([0.1, 1.0]) == [0.3, 1.2]\n")
    body = "def f(x):\n    if type(x) is list:\n        return [v + {d} for v in x]\n    return x + {d}\n"
    assert 0.1 + 0.2 != 0.3  # the second and third asserts are off by one ulp
    assert _both(scorer, task, "```python\n" + body.format(d=0.2) + "```") == (0.0, 1.0)
    assert _both(scorer, task, "```python\n" + body.format(d=0.2001) + "```") == (0.0, 0.0)


def test_values_of_other_types_still_fail_under_both_harnesses(scorer):
    """EvalPlus would accept a namedtuple equal to the expected tuple; the sandbox compares built-in types only."""
    task = _task("assert f() == (1, 2)\n")
    reply = ("```python\nfrom collections import namedtuple\nP = namedtuple('P', 'a b')\n\n"
             "def f():\n    return P(1, 2)\n```")
    assert _both(scorer, task, reply) == (0.0, 0.0)
    plain = "```python\ndef f():\n    return (1, 2)\n```"
    assert _both(scorer, task, plain) == (1.0, 1.0)


def test_a_slow_problem_gets_evalplus_s_budget_from_its_reference_time(scorer):
    """The reference takes ~0.6 s, so EvalPlus allows 1 s + 4 x its time + 2 s; distlab's limit here is 1 s."""
    slow = "import time\n\ndef f(x):\n    time.sleep({s})\n    return x\n"
    task = _task("assert f(3) == 3\n", solution=slow.format(s=0.6), task_id="mbpp-sanitized/902")
    REFERENCE_TIMES.measure([task], scorer.sandbox)
    measured = REFERENCE_TIMES.seconds(task)
    assert measured is not None and 0.6 <= measured < 2.0
    assert judging(direct=False).time_limit(task) == pytest.approx(time_limit(1, measured))
    reply = "```python\n" + slow.format(s=1.5) + "```"
    assert _both(scorer, task, reply) == (0.0, 1.0)
    assert scorer.verdict(task, reply).status == "timeout"


def test_a_task_whose_reference_fails_gets_one_second_per_assert(scorer):
    times = ReferenceTimes()
    task = _task("assert f(1) == 1\nassert f(2) == 2\n", solution="def f(x):\n    return 0\n")
    times.measure([task, _task("assert f(1) == 1\n")], scorer.sandbox)  # the second has no solution to run
    assert times.seconds(task) is None and time_limit(2, times.seconds(task)) == pytest.approx(4.0)
