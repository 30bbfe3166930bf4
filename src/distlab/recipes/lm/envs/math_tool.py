"""``env.name=math_tool``: a math problem with a Python tool (a calculator that runs in the sandbox).

The prompt tells the policy it may calculate in a ```` ```python ```` block, the format of tool-integrated reasoning
that instruct models already write (Qwen2.5-Math's, ToRA's). A reply that a closing fence ended (the fence and a
newline are a stop string; an EOS instead ends the turn) is a tool call: the code runs in the sandbox (:mod:`.python_tool`) and what it
printed comes back in an ```` ```output ```` block, in the same assistant turn, and the policy goes on. A reply without a tool call is the answer: reward 1 when its final answer matches the task's
(:func:`~distlab.recipes.lm.tasks.math_answer.check_answer`, pure text), else 0. ``env.max_turns`` bounds the
replies, the answer included: an episode whose last allowed reply is still a tool call gets 0.
"""

from __future__ import annotations

import textwrap

from distlab.recipes.lm.envs.api import ROLE_ENV, Env, Step
from distlab.recipes.lm.envs.context import EnvContext
from distlab.recipes.lm.envs.python_tool import run_tool
from distlab.recipes.lm.rollout.stops import FINISH_STOP, Completion, decode
from distlab.recipes.lm.tasks import Task, chat_messages, stop_strings
from distlab.recipes.lm.tasks.math_answer import check_answer
from distlab.recipes.lm.tasks.prompts import MATH_CHAT_INSTRUCTION, MATH_TEXT_LEAD, render_prompt, text_prompt

TOOL_OPEN, TOOL_CLOSE = "```python", "```"
TOOL_STOP = "```\n"  # a closed block; an opening fence names its language, so it never matches
OUTPUT_OPEN, OUTPUT_CLOSE = "```output\n", "\n```\n"
ROLE_TOOL_OUTPUT = 4  # what the tool printed
TOOL_INSTRUCTION = ("To calculate, you may write Python code in a ```python block; what it prints (or its last "
                    "expression's value) comes back in an ```output block.")


def tool_call(text: str) -> str | None:
    """The code of a reply that ends by closing a ```python block (its decoded tokens), else None."""
    start = text.rfind(TOOL_OPEN)
    if start < 0:
        return None
    end = text.find(TOOL_CLOSE, start + len(TOOL_OPEN))
    if end < 0 or text[end + len(TOOL_CLOSE):].strip():
        return None
    return textwrap.dedent(text[start + len(TOOL_OPEN):end].strip("\n"))


def math_tool_prompt(task: Task, tok, mode: str, few_shot) -> str:
    """The problem with the tool's instruction: in the user's message (chat), before ``Solution:`` (text)."""
    if mode == "chat":
        messages = chat_messages(task, few_shot=few_shot)
        messages[-1]["content"] = f"{task.prompt}\n{TOOL_INSTRUCTION}\n{MATH_CHAT_INSTRUCTION}"
        return render_prompt(tok, messages)
    plain = text_prompt(task, few_shot=few_shot)
    return plain[:len(plain) - len(MATH_TEXT_LEAD)] + f"{TOOL_INSTRUCTION}\n{MATH_TEXT_LEAD}"


class MathTool(Env):
    """A math task answered after any number of tool calls, up to ``env.max_turns`` replies in all."""

    task_kind = "math"

    def __init__(self, task: Task, ctx: EnvContext) -> None:
        self.task, self.ctx = task, ctx
        self.max_turns = ctx.config.max_turns
        self.stop_strings = (TOOL_STOP, *stop_strings(task, ctx.mode))
        self.turn = 0

    def reset(self) -> str:
        self.turn = 0
        return math_tool_prompt(self.task, self.ctx.tokenizer, self.ctx.mode, list(self.ctx.few_shot))

    def step(self, reply: Completion) -> Step:
        self.turn += 1
        stopped = reply.finish_reason == FINISH_STOP  # by the closing fence: an EOS ends the turn, and an answer
        code = tool_call(decode(self.ctx.tokenizer, reply.token_ids)) if stopped else None
        if code is None:
            return Step([], check_answer(reply.text, self.task.answer)[0], True, {"tool_calls": 0.0})
        if self.turn >= self.max_turns:  # no reply left to answer in
            return Step([], 0.0, True, {"tool_calls": 0.0, "out_of_turns": 1.0})
        result = run_tool(self.ctx.scorer.sandbox, code, self.ctx.config.max_observation_chars)
        pieces = [(OUTPUT_OPEN, ROLE_ENV), (result.output, ROLE_TOOL_OUTPUT), (OUTPUT_CLOSE, ROLE_ENV)]
        return Step(pieces, 0.0, False, {"tool_calls": 1.0, "tool_errors": float(not result.ok)})
