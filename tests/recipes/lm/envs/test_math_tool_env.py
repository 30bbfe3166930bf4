"""``env.name=math_tool``: a reply that closes a ```python block is a tool call, run in the sandbox
(``tests/sandbox/test_python_tool.py``) with only what it printed coming back; a reply without one is the answer,
checked as text."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from distlab.recipes.lm.envs.config import EnvConfig  # noqa: E402
from distlab.recipes.lm.envs.context import EnvContext  # noqa: E402
from distlab.recipes.lm.envs.math_tool import (ROLE_TOOL_OUTPUT, TOOL_INSTRUCTION, MathTool,  # noqa: E402
                                               tool_call)
from distlab.recipes.lm.envs.trajectory import encode  # noqa: E402
from distlab.recipes.lm.models.tiny import byte_tokenizer  # noqa: E402
from distlab.recipes.lm.rewards.scorer import RewardScorer  # noqa: E402
from distlab.recipes.lm.rollout.stops import Completion  # noqa: E402
from distlab.recipes.lm.tasks import Task  # noqa: E402
from distlab.sandbox import SandboxConfig  # noqa: E402

TASK = Task("m0", "Tom has 12 boxes of 7 apples. How many apples?", None, "", "", "math",
            solution="12 * 7 = 84. The answer is 84.", kind="math", answer="84")


def test_a_tool_call_is_a_reply_that_ends_by_closing_a_python_block():
    assert tool_call("Let me compute.\n```python\n  x = 12 * 7\n  x\n```\n") == "x = 12 * 7\nx"
    assert tool_call("```python\n1\n``` and then more text") is None  # it went on: not a call
    assert tool_call("The answer is 84.") is None and tool_call("```python\n1 + 1\n") is None


@pytest.fixture(scope="module")
def scorer():
    s = RewardScorer(SandboxConfig(workers=2, timeout_s=2.0), "chat")
    yield s
    s.close()


def _reply(tok, text, finish="stop"):
    return Completion(0, [], encode(tok, text), text.removesuffix("```\n"), finish)  # text: cut at the stop


def test_the_environment_runs_the_call_then_checks_the_answer(scorer):
    tok = byte_tokenizer()
    env = MathTool(TASK, EnvContext(tok, "chat", [], scorer, EnvConfig("math_tool", max_turns=3)))
    prompt = env.reset()
    assert TOOL_INSTRUCTION in prompt and TASK.prompt in prompt and "```\n" in env.stop_strings
    step = env.step(_reply(tok, "Multiply:\n```python\n12 * 7\n```\n"))
    assert not step.done and step.reward == 0.0 and step.info == {"tool_calls": 1.0, "tool_errors": 0.0}
    assert step.observation == [("```output\n", 2), ("84", ROLE_TOOL_OUTPUT), ("\n```\n", 2)]
    step = env.step(_reply(tok, "So the answer is \\boxed{84}.", finish="eos"))
    assert step.done and step.reward == 1.0
    wrong = MathTool(TASK, env.ctx)
    wrong.reset()
    assert wrong.step(_reply(tok, "The answer is \\boxed{85}.")).reward == 0.0


def test_a_tool_call_on_the_last_turn_scores_zero(scorer):
    tok = byte_tokenizer()
    env = MathTool(TASK, EnvContext(tok, "text", [], scorer, EnvConfig("math_tool", max_turns=1)))
    assert env.reset().endswith(f"{TOOL_INSTRUCTION}\nSolution:")
    step = env.step(_reply(tok, " 84\n```python\n84\n```\n"))  # holds the number, but never answered
    assert step.done and step.reward == 0.0 and step.info["out_of_turns"] == 1.0


def test_a_block_closed_by_the_end_of_the_turn_is_an_answer_not_a_call(scorer):
    tok = byte_tokenizer()
    env = MathTool(TASK, EnvContext(tok, "chat", [], scorer, EnvConfig("math_tool", max_turns=3)))
    env.reset()
    step = env.step(_reply(tok, "The answer is 84.\n```python\nprint(84)\n```", finish="eos"))
    assert step.done and step.reward == 1.0 and step.info == {"tool_calls": 0.0}
