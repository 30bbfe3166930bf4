"""``env.name=code_feedback``: each reply's program runs against the tests in the sandbox; a failing one is answered
with the failing assert and the error, a passing one ends the episode with reward 1, and the last failing one with 0.
Replies are written by hand, so what the environment must answer is known."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from distlab.recipes.lm.envs.code_feedback import (INSTRUCTION, ROLE_FEEDBACK, CodeFeedback,  # noqa: E402
                                                   failing_statement)
from distlab.recipes.lm.envs.config import EnvConfig  # noqa: E402
from distlab.recipes.lm.envs.context import EnvContext  # noqa: E402
from distlab.recipes.lm.envs.trajectory import Trajectory, encode  # noqa: E402
from distlab.recipes.lm.models.tiny import byte_tokenizer  # noqa: E402
from distlab.recipes.lm.rewards.scorer import RewardScorer  # noqa: E402
from distlab.recipes.lm.rollout.stops import Completion  # noqa: E402
from distlab.recipes.lm.tasks import Task  # noqa: E402
from distlab.recipes.lm.tasks.prompts import render_prompt  # noqa: E402
from distlab.sandbox import SandboxConfig  # noqa: E402

TASK = Task("t0", "Write add1(x), which returns x plus one.", "add1",
            "assert add1(1) == 2\nassert add1(-1) == 0\nassert add1(\n    41\n) == 42\n", "assert add1(1) == 2",
            "synthetic", solution="def add1(x):\n    return x + 1")
WRONG = "def add1(x):\n    return x + 1 if x > 0 else x\n"  # passes the first assert, fails the second
RIGHT = "def add1(x):\n    return x + 1\n"


@pytest.fixture(scope="module")
def scorers():
    made = {mode: RewardScorer(SandboxConfig(workers=2, timeout_s=3.0), mode) for mode in ("text", "chat")}
    yield made
    for s in made.values():
        s.close()


def _env(scorers, mode, max_turns=3):
    tok = byte_tokenizer()
    return CodeFeedback(TASK, EnvContext(tok, mode, [], scorers[mode], EnvConfig("code_feedback", max_turns))), tok


def _reply(tok, ids_before, text, finish="stop"):
    return Completion(0, list(ids_before), encode(tok, text), text, finish)


def test_a_failing_program_sees_the_failing_assert_then_a_fix_ends_the_episode(scorers):
    env, tok = _env(scorers, "text")
    prompt = env.reset()
    assert prompt.endswith("```python\n") and TASK.prompt in prompt
    step = env.step(_reply(tok, encode(tok, prompt), WRONG))
    assert not step.done and step.reward == 0.0 and step.info == {"passed_at_turn_1": 0.0}
    text = "".join(t for t, _ in step.observation)
    feedback = [t for t, role in step.observation if role == ROLE_FEEDBACK]
    assert feedback == ["Test result: a test failed.\nassert add1(-1) == 0\nAssertionError"]
    assert text == "\n" + feedback[0] + "\n" + INSTRUCTION + "\n```python\n"  # the reply closed its own fence
    step = env.step(_reply(tok, [], RIGHT))
    assert step.done and step.reward == 1.0 and step.observation == [] and step.info == {"passed_at_turn_2": 1.0}


def test_the_last_turn_ends_the_episode_with_zero_and_nothing_ran_is_said_as_such(scorers):
    env, tok = _env(scorers, "text", max_turns=2)
    env.reset()
    step = env.step(_reply(tok, [], "there is no code here", finish="length"))
    said = "".join(t for t, _ in step.observation)
    assert said.startswith("\n```\n") and "no Python code was found" in said  # an unclosed fence is closed first
    step = env.step(_reply(tok, [], WRONG))
    assert step.done and step.reward == 0.0 and step.observation == []


def test_a_multi_line_assert_is_shown_whole():
    stderr = 'Traceback (most recent call last):\n  File "tests.py", line 4, in <module>\nAssertionError\n'
    assert failing_statement(TASK.tests, stderr) == "assert add1(\n    41\n) == 42"
    assert failing_statement(TASK.tests, "no traceback") == "" and failing_statement("def (", stderr) == ""


def test_chat_mode_answers_with_a_user_turn_of_the_template(scorers):
    env, tok = _env(scorers, "chat")
    prompt = env.reset()
    t = Trajectory.start(0, encode(tok, prompt))
    reply = _reply(tok, t.prompt_ids, f"```python\n{WRONG}```<|im_end|>", finish="eos")
    reply.text = f"```python\n{WRONG}```"
    t.add_reply(reply, 1)
    step = env.step(reply)
    t.add_observation(tok, step.observation)
    user = "Test result: a test failed.\nassert add1(-1) == 0\nAssertionError\n" + INSTRUCTION + \
        "\nReply with the Python code in one ```python block."
    history = [{"role": "user", "content": TASK.prompt + "\nReply with the Python code in one ```python block."},
               {"role": "assistant", "content": reply.text}, {"role": "user", "content": user}]
    assert tok.decode(t.ids) == render_prompt(tok, history)  # token for token the template's conversation
    assert env.prompt == render_prompt(tok, history)  # the next turn's reply is checked against this rendering
    step = env.step(_reply(tok, [], f"```python\n{RIGHT}```"))
    assert step.done and step.reward == 1.0
