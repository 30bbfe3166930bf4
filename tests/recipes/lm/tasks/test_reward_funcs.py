"""Several reward functions with weights: built-ins, a user's function by import path, its timeout and errors."""

from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from distlab.errors import DistlabError
from distlab.recipes.lm.rewards.functions import RewardFunctions, Sample, check_rewards, overlong_penalty
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


PLUGIN = '''import itertools
import math

_calls = itertools.count()


def nan_after_step_1(prompt, completion, task):
    """0 for the first step's 8 samples (2 prompts x 4 generations), then NaN."""
    return 0.0 if next(_calls) < 8 else math.nan
'''


def test_a_run_stopped_by_its_reward_says_its_directory_is_kept(tmp_path):
    """The run directory exists when a user reward fails mid-run: the one line says it is kept, what it holds
    (a checkpoint of step 1 here) and how to resume or delete it, and the directory is really there to resume."""
    pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")
    from clitools import run_cli

    (tmp_path / "my_rewards.py").write_text(PLUGIN)
    proc = run_cli(["train", "grpo", "model.source=tiny:llama-2l", "model.prompt_mode=text", "task.train=math",
                    "task.families=groups,minutes", "task.train_size=16", "task.eval_size=2", "prompts_per_step=2",
                    "num_generations=4", "micro_batch_size=4", "sampling.max_completion_length=8", "steps=3",
                    "evaluation.before=false", "ckpt.every=1", "reward_funcs=[tests,my_rewards:nan_after_step_1]",
                    "log.progress=false", "run.name=rn"], tmp_path, check=False, env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("distlab: error: reward my_rewards:nan_after_step_1 returned nan"), line
    run = tmp_path / "runs" / "rn"
    for words in (f"the run directory {Path('runs') / 'rn'} is kept", "config.yaml", "checkpoints up to step 1",
                  "run.name=rn) to resume from step 1", f"rm -r {Path('runs') / 'rn'}"):
        assert words in line, (words, line)
    assert (run / "config.yaml").is_file() and (run / "checkpoints" / "step00000001").is_dir()
    assert not (run / "checkpoints" / "step00000002").exists()


def test_the_kept_note_without_a_checkpoint_says_start_again(tmp_path):
    from distlab.launch.worker import kept_note

    run = tmp_path / "r"
    run.mkdir()
    (run / "config.yaml").write_text("steps: 1\n")
    note = kept_note(run, run / "checkpoints")
    assert f"the run directory {run} is kept (config.yaml, no checkpoint yet)" in note
    assert "to start again" in note and "resume" not in note and f"rm -r {run}" in note
