"""Execution rewards: the one scorer both LM recipes use, its verdicts and its counters under many threads."""

import pytest

pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")

from distlab.recipes.lm.rewards import RewardScorer  # noqa: E402
from distlab.recipes.lm.sandbox import SandboxConfig  # noqa: E402
from distlab.recipes.lm.tasks import synthetic_tasks  # noqa: E402


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
