"""``env.name=code_feedback``: write a program; after a failing attempt, see the failing test and try again.

Each reply's program runs against the task's tests in the sandbox (:meth:`RewardScorer.verdict`). A pass ends the
episode with reward 1; otherwise the next turn is shown what failed -- the failing assert's source
(``env.show_failing_test``) and the error's last line, or why nothing ran (no code, a timeout) -- and asked for a
fixed program, up to ``env.max_turns`` replies; the last failing reply ends it with reward 0.

The feedback shows asserts of the tests that score the episode (as the brief of issue 49 asks: turn t sees the
failing assert). A policy can therefore learn to special-case the asserts it was shown; with ``max_turns=N`` it
sees at most N - 1 of them. ``env.show_failing_test=false`` shows the error line only.
"""

from __future__ import annotations

import ast
import re

from distlab.recipes.lm.envs.api import ROLE_ENV, Env, Step
from distlab.recipes.lm.envs.chat_turns import next_user_turn
from distlab.recipes.lm.envs.context import EnvContext
from distlab.recipes.lm.rewards.scorer import Verdict
from distlab.recipes.lm.rollout.stops import FINISH_STOP, Completion
from distlab.recipes.lm.tasks import Task, chat_messages, stop_strings
from distlab.recipes.lm.tasks.prompts import chat_instruction, FENCE_CLOSE, FENCE_OPEN, prompt_text, render_prompt

ROLE_FEEDBACK = 3  # the test result shown to the next turn
INSTRUCTION = "Fix the program so that every test passes."
_TESTS_LINE = re.compile(r'File "tests\.py", line (\d+)')
WHY = {"timeout": "the program ran out of time", "memory": "the program ran out of memory",
       "killed": "the program was killed", "no_code": "no Python code was found in the reply",
       "bad_tests": "the tests cannot judge the program"}


def failing_statement(tests: str, stderr: str) -> str:
    """The source of the tests' statement the traceback in ``stderr`` points at (its last ``tests.py`` line);
    "" when there is none or the tests do not parse."""
    lines = _TESTS_LINE.findall(stderr)
    if not lines:
        return ""
    line = int(lines[-1])
    try:
        body = ast.parse(tests).body
    except SyntaxError:
        return ""
    for node in body:
        if node.lineno <= line <= (node.end_lineno or node.lineno):
            return ast.get_source_segment(tests, node) or ""
    return ""


def last_line(text: str) -> str:
    """The last non-empty line: a traceback's exception and message."""
    lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
    return lines[-1] if lines else ""


def feedback_text(task: Task, verdict: Verdict, show_test: bool, max_chars: int) -> str:
    """What the next turn is told about a failed attempt: the failing assert and the error, or why nothing ran."""
    if verdict.status in WHY:
        said = f"Test result: {WHY[verdict.status]}."
    else:
        where = failing_statement(task.tests, verdict.stderr_tail) if show_test else ""
        error = last_line(verdict.stderr_tail)
        said = "Test result: a test failed." if verdict.status == "failed" else "Test result: the program raised."
        if where:
            said += f"\n{where.strip()}"
        if error and error not in where:
            said += f"\n{error}"
    return said if len(said) <= max_chars else said[:max_chars].rstrip() + " ..."


class CodeFeedback(Env):
    """A code task over up to ``env.max_turns`` replies, each after the previous one's failing test."""

    task_kind = "code"

    def __init__(self, task: Task, ctx: EnvContext) -> None:
        self.task, self.ctx = task, ctx
        self.max_turns = ctx.config.max_turns
        self.stop_strings = stop_strings(task, ctx.mode)
        self.history = chat_messages(task, few_shot=ctx.few_shot) if ctx.mode == "chat" else []
        self.prompt = ""
        self.turn = 0

    def reset(self) -> str:
        self.turn = 0
        self.prompt = prompt_text(self.task, self.ctx.tokenizer, self.ctx.mode, list(self.ctx.few_shot))
        return self.prompt

    def step(self, reply: Completion) -> Step:
        self.turn += 1
        verdict = self.ctx.scorer.verdict(self.task, reply.text)
        info = {f"passed_at_turn_{self.turn}": verdict.reward}
        if verdict.reward == 1.0 or self.turn >= self.max_turns:
            return Step([], verdict.reward, True, info)
        cfg = self.ctx.config
        feedback = feedback_text(self.task, verdict, cfg.show_failing_test, cfg.max_observation_chars)
        return Step(self._next_turn(reply, feedback), 0.0, False, info)

    def _next_turn(self, reply: Completion, feedback: str) -> list:
        """Text mode: close the reply's fence, the feedback, the instruction, a new fence. Chat mode: a user turn."""
        if self.ctx.mode == "text":
            pieces = [] if reply.finish_reason == FINISH_STOP else [("\n" + FENCE_CLOSE, ROLE_ENV)]
            return pieces + [("\n", ROLE_ENV), (feedback, ROLE_FEEDBACK), ("\n" + INSTRUCTION + "\n" + FENCE_OPEN,
                                                                         ROLE_ENV)]
        user = f"{feedback}\n{INSTRUCTION}\n{chat_instruction(self.task)}"
        pieces = next_user_turn(self.ctx.tokenizer, self.history, self.prompt, reply, user,
                                [(feedback, ROLE_FEEDBACK)])
        self.history = [*self.history, {"role": "assistant", "content": reply.text}, {"role": "user", "content": user}]
        self.prompt = render_prompt(self.ctx.tokenizer, self.history)  # what the next reply is sampled after
        return pieces
