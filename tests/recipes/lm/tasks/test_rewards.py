"""Execution rewards: the one scorer both LM recipes use, its verdicts and its counters under many threads."""

import pytest

pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")

from distlab.recipes.lm.rewards.scorer import RewardScorer  # noqa: E402
from distlab.recipes.lm.tasks import synthetic_tasks  # noqa: E402
from distlab.sandbox import SandboxConfig  # noqa: E402


@pytest.fixture
def scorer():
    s = RewardScorer(SandboxConfig(workers=8, timeout_s=5), "chat")
    yield s
    s.close()


def test_counters_are_exact_when_many_threads_score_at_once(scorer):
    """Both ``submit`` and ``submit_detailed`` count programs with no code, each under the lock."""
    task = synthetic_tasks(1, seed=0)[0]
    futures = [scorer.submit(task, "I do not know") for _ in range(1500)]
    futures += [scorer.submit_detailed(task, "no code either") for _ in range(1500)]
    results = [f.result() for f in futures]
    assert results[:1500] == [0.0] * 1500
    assert {(v.reward, v.status) for v in results[1500:]} == {(0.0, "no_code")}
    assert scorer.take_counts()["no_code"] == 3000
    assert scorer.take_counts()["no_code"] == 0  # taken: the next step starts from zero


def test_a_passing_program_gets_reward_one_and_its_status(scorer):
    task = synthetic_tasks(1, seed=0)[0]
    good = "```python\n" + task.solution + "\n```" if task.solution else None
    if good is None:
        pytest.skip("synthetic task without a reference solution")
    verdict = scorer.submit_detailed(task, good).result()
    assert verdict.reward == 1.0 and verdict.status == "passed", verdict
    assert scorer.submit(task, good).result() == 1.0


THREE = "import math\nLIMIT = 3\nassert f(1) == 2\nassert f(2) == 3  # the second\nassert f(math.floor(LIMIT)) == 5\n"


def _three_tests_task():
    from distlab.recipes.lm.tasks import Task

    return Task(task_id="three", prompt="Write f.", entry_point="f", tests=THREE, visible_test="", source="test")


def test_split_tests_keeps_the_setup_with_each_assert():
    from distlab.recipes.lm.rewards.scorer import split_tests

    parts = split_tests(THREE)
    assert len(parts) == 3
    assert parts[1] == "import math\nLIMIT = 3\nassert f(2) == 3\n"
    assert parts[2] == "import math\nLIMIT = 3\nassert f(math.floor(LIMIT)) == 5\n"
    assert split_tests("assert f(1) == 2\n") == ["assert f(1) == 2\n"]  # one assert: the file as it is
    assert split_tests("check(f)\n") == ["check(f)\n"]  # HumanEval's one call: all or nothing
    assert split_tests("assert (\n") == ["assert (\n"]  # the sandbox reports the syntax error


@pytest.mark.parametrize("body, want", [("return x + 1", 2 / 3), ("return 2 * x - 1 if x == 3 else x + 1", 1.0),
                                        ("return 0", 0.0)])
def test_tests_fraction_gives_partial_credit_in_the_sandbox(scorer, body, want):
    task = _three_tests_task()
    completion = f"```python\ndef f(x):\n    {body}\n```"
    assert scorer.submit_fraction(task, completion).result() == pytest.approx(want)
    whole = scorer.submit(task, completion)  # when tests is computed anyway, its run is reused
    assert scorer.submit_fraction(task, completion, whole).result() == pytest.approx(want)
    assert whole.result() == (1.0 if want == 1.0 else 0.0)
    assert scorer.submit_fraction(task, "no code at all").result() == 0.0


def test_tests_fraction_is_below_one_when_the_asserts_pass_alone_but_not_together(scorer):
    from distlab.recipes.lm.tasks import Task

    tests = "assert f() == 1\nassert f() == 1\n"  # f counts its calls: each assert alone passes, both together fail
    task = Task(task_id="state", prompt="p", entry_point="f", tests=tests, visible_test="", source="test")
    completion = "```python\nN = []\ndef f():\n    N.append(1)\n    return len(N)\n```"
    assert scorer.submit(task, completion).result() == 0.0
    assert scorer.submit_fraction(task, completion).result() == 0.5
