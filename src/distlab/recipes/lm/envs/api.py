"""The environment API: an episode is a list of turns, the policy's replies and the environment's answers.

An :class:`Env` plays one episode on text. ``reset()`` gives the first prompt; each ``step(reply)`` takes the
policy's reply (a sampled :class:`~distlab.recipes.lm.rollout.stops.Completion`: its text, and the token ids it was sampled
as) and answers with a :class:`Step`: the observation the policy sees before its next turn, the turn's reward and
whether the episode is over. Observations are text pieces, each with a role (an int the environment chooses: a
hint, a test result, a tool's output); the driver (:mod:`.rollout`) appends their tokens to the episode without
re-tokenising what the policy sampled, and marks them as the environment's, so they are never trained on and carry
no KL (:class:`~distlab.recipes.lm.envs.trajectory.Trajectory` holds the per-token mask the loss reads).

Anything a model wrote is hostile: an environment that runs it (tests, a tool call) does so through the sandbox
(:class:`~distlab.recipes.lm.rewards.scorer.RewardScorer`, :mod:`.python_tool`), never in the training process.

A reward may be a ``Future`` when the sandbox still computes it and nothing before the episode's end needs it
(SCoRe scores turn 1 while turn 2 is sampled). ``step_all`` steps a batch: by default every live episode's
``step`` on the caller's thread pool, so their sandbox runs overlap; an environment whose answers need one batched
model call (SCoRe's guidance hints) overrides it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any

from distlab.recipes.lm.rollout.stops import Completion

ROLE_PROMPT = 0  # the first prompt's tokens (the default role of reset's text)
ROLE_POLICY = 1  # the policy's replies (an environment may name each turn's role apart: SCoRe's y1 and y2)
ROLE_ENV = 2  # what the environment answers (the default role of an observation piece)

Piece = tuple[str, int]  # a piece of text and its role


@dataclass
class Step:
    """What the environment answers to one reply: ``observation`` pieces (empty when ``done``), the turn's reward
    (a number, or a ``Future`` of one), whether the episode ended, and anything to log (``info``: numbers)."""

    observation: list[Piece]
    reward: float | Future
    done: bool
    info: dict[str, float] = field(default_factory=dict)


class Env(ABC):
    """One episode on text. ``max_turns`` bounds the policy's replies; ``stop_strings`` end a reply early;
    ``task_kind`` is the kind of task it plays (``code`` or ``math``; empty: either)."""

    max_turns: int = 1
    stop_strings: tuple[str, ...] = ()
    task_kind: str = ""

    @abstractmethod
    def reset(self) -> str:
        """The first prompt, as the model reads it (chat template applied)."""

    @abstractmethod
    def step(self, reply: Completion) -> Step:
        """The environment's answer to the policy's reply of the current turn."""

    def reply_role(self, turn: int) -> int:
        """The role of the policy's reply in ``turn`` (0 first); trained tokens, whatever the value."""
        return ROLE_POLICY

    @classmethod
    def step_all(cls, envs: Sequence[Env], replies: Sequence[Completion], pool: Executor) -> list[Step]:
        """Every live episode's step at once. ``step`` runs on ``pool``'s threads, so it may block on the sandbox
        but must not wait for other work queued on ``pool``."""
        futures = [pool.submit(env.step, reply) for env, reply in zip(envs, replies)]
        return [f.result() for f in futures]


def resolved(reward: float | Future) -> float:
    """A reward as a number, waiting for it when the sandbox still computes it."""
    return float(reward.result() if isinstance(reward, Future) else reward)


def done_future(value: Any) -> Future:
    """A future that already holds ``value`` (where an API takes a future of a number the episode already has)."""
    out: Future = Future()
    out.set_result(value)
    return out


def mapped(future: Future, fn: Callable[[Any], Any]) -> Future:
    """A future of ``fn(future's result)``, set when ``future`` completes (no thread waits for it)."""
    out: Future = Future()

    def finish(done: Future) -> None:
        error = done.exception()
        if error is not None:
            out.set_exception(error)
        else:
            try:
                out.set_result(fn(done.result()))
            except Exception as exc:  # the mapping's own error surfaces where the reward is read
                out.set_exception(exc)

    future.add_done_callback(finish)
    return out
