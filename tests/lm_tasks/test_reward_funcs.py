"""Several reward functions with weights: built-ins, a user's function by import path, its timeout and errors."""

from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from distlab.errors import DistlabError
from distlab.recipes.lm.reward_funcs import RewardFunctions, Sample, check_rewards, overlong_penalty
from distlab.recipes.lm.tasks import synthetic_tasks

TASK = synthetic_tasks(1, seed=0)[0]
GOOD = "```python\n" + (TASK.solution or "def f(x):\n    return x") + "\n```"


def _done(value: float) -> Future:
    f: Future = Future()
    f.set_result(value)
    return f


def _fns(names, weights=(), timeout_s=2.0, pool=None):
    return RewardFunctions(names, weights, mode="chat", max_len=100, overlong_buffer=20, timeout_s=timeout_s,
                           pool=pool or ThreadPoolExecutor(2))


def test_weighted_rewards_are_summed_as_declared():
    fns = _fns(["tests", "format", "overlong", "reward_plugins:short_is_good"], [1.0, 0.5, 2.0, 3.0])
    samples = [Sample(TASK, "p", GOOD, 10, False), Sample(TASK, "p", "no code here", 90, False)]
    started = [fns.submit(s, lambda v=v: _done(v)) for s, v in zip(samples, (1.0, 0.0))]
    values = fns.collect(started)
    assert values["tests"] == [1.0, 0.0] and values["format"] == [1.0, 0.0]
    assert values["overlong"] == [0.0, -0.5]  # 90 tokens: 10 past the 80 where the penalty starts, of 20
    short = [1 / (1 + len(GOOD)), 1 / (1 + len("no code here"))]
    assert values["reward_plugins:short_is_good"] == pytest.approx(short)
    assert fns.total(values) == pytest.approx([1.0 + 0.5 + 0.0 + 3 * short[0], 0.0 + 0.0 - 1.0 + 3 * short[1]])


def test_overlong_penalty_is_dapos_soft_ramp():
    assert [overlong_penalty(n, 100, 20) for n in (0, 80, 90, 99, 100, 150)] == [0.0, 0.0, -0.5, -0.95, -1.0, -1.0]


@pytest.mark.parametrize("name, message", [
    ("reward_plugins:slow", "did not return within reward_timeout_s=0.2"),
    ("reward_plugins:broken", "raised ValueError: no score for you"),
    ("reward_plugins:wordy", "returned str 'high', not a number"),
])
def test_a_user_reward_that_misbehaves_is_one_line(name, message):
    fns = _fns([name], timeout_s=0.2)
    with pytest.raises(DistlabError, match=message):
        fns.collect([fns.submit(Sample(TASK, "p", GOOD, 5, False), lambda: _done(1.0))])


@pytest.mark.parametrize("names, weights, message", [
    (["tets"], [], "did you mean tests"),
    (["no_such_module:f"], [], "cannot load no_such_module:f"),
    (["reward_plugins:NOT_A_FUNCTION"], [], "is a int, not a function"),
    (["tests", "format"], [1.0], "2 reward_funcs"),
    ([], [], "reward_funcs is empty"),
])
def test_bad_reward_settings_fail_before_launch(names, weights, message):
    with pytest.raises(DistlabError, match=message):
        check_rewards(names, weights, 10.0)


def test_tests_fraction_is_weighted_and_reuses_the_tests_run():
    fns = _fns(["tests_fraction", "tests", "format"], [2.0, 1.0, 0.5])
    seen = []

    def fraction(whole, value):
        seen.append(whole)
        return _done(value)

    samples = [Sample(TASK, "p", GOOD, 10, False), Sample(TASK, "p", GOOD, 10, False)]
    whole = [_done(1.0), _done(0.0)]
    started = [fns.submit(s, lambda w=w: w, lambda wh, v=v: fraction(wh, v))
               for s, w, v in zip(samples, whole, (1.0, 2 / 3))]
    assert seen == whole  # the tests future is handed over, so the whole program runs once
    values = fns.collect(started)
    assert values["tests_fraction"] == [1.0, 2 / 3] and values["tests"] == [1.0, 0.0]
    assert fns.total(values) == pytest.approx([2.0 + 1.0 + 0.5, 2 * 2 / 3 + 0.0 + 0.5])
    only = _fns(["tests_fraction"])
    got = only.collect([only.submit(samples[0], lambda: pytest.fail("tests is not named"),
                                    lambda wh: fraction(wh, 0.5))])
    assert got == {"tests_fraction": [0.5]} and seen[-1] is None
    check_rewards(["tests_fraction"], [], 1.0)
