"""SCoRe's episode as an environment (:mod:`distlab.recipes.lm.envs.api`): two replies, turn 2 after turn 1's result.

``reset`` is turn 1's prompt; the step after y1 submits y1 to the sandbox, builds the turn-2 prompt's pieces
(:func:`~.episode.turn2_pieces`: the execution feedback when the policy sees it, the guidance model's hint, the
instruction) and the step after y2 submits y2 and ends the episode. Both rewards are futures: turn 1's result is
waited for before turn 2 only when a model must read it (``policy_sees_execution``, or ``hint_sees_execution`` with a
guidance model), so otherwise the sandbox runs y1 while turn 2 is sampled. The hints come from one batched call of
the guidance model over the whole rollout, which is why this environment steps its episodes together
(:meth:`SelfCorrection.step_all`). The episode's :class:`~.episode.Episode` is filled as it is played.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any

from distlab.recipes.lm.envs.api import Env, Step, mapped
from distlab.recipes.lm.rewards.scorer import RewardScorer
from distlab.recipes.lm.rollout.stops import Completion
from distlab.recipes.lm.tasks import Task, stop_strings
from distlab.recipes.score.episode import ROLE_Y1, ROLE_Y2, Episode, execution_feedback, turn2_pieces


@dataclass(frozen=True)
class SelfCorrectionSetup:
    """What the episodes of one rollout share: the run's config (``instruction``, ``restate_problem``,
    ``policy_sees_execution``, ``hint_sees_execution``, ``error_tail_chars``), the policy's tokenizer and prompt mode,
    the few-shot examples, the sandbox's scorer and ``hints`` (a guidance model's batched call that fills each
    episode's hint; None without one)."""

    cfg: Any
    tok: Any
    mode: str
    few_shot: Sequence[Task]
    scorer: RewardScorer
    hints: Callable[[list[Episode]], None] | None = None

    @property
    def waits_for_turn1(self) -> bool:
        """A model reads turn 1's test result before turn 2: the policy, or the guidance writing its hint."""
        return bool(self.cfg.policy_sees_execution or (self.cfg.hint_sees_execution and self.hints is not None))


class SelfCorrection(Env):
    """One SCoRe episode of ``task``: y1 after ``prompt1``, then y2 after the turn-2 pieces."""

    max_turns = 2

    def __init__(self, task: Task, group: int, prompt1: str, setup: SelfCorrectionSetup) -> None:
        self.episode = Episode(task=task, group=group)
        self.prompt1, self.setup = prompt1, setup
        self.stop_strings = stop_strings(task, setup.mode)
        self.first: Future | None = None  # turn 1's Verdict, from the sandbox

    def reset(self) -> str:
        return self.prompt1

    def reply_role(self, turn: int) -> int:
        return ROLE_Y1 if turn == 0 else ROLE_Y2

    def step(self, reply: Completion) -> Step:
        return type(self).step_all([self], [reply], None)[0]

    @classmethod
    def step_all(cls, envs: Sequence[SelfCorrection], replies: Sequence[Completion], pool: Executor | None
                 ) -> list[Step]:
        if envs[0].episode.y1 is None:
            return _after_turn1(list(envs), list(replies))
        out = []
        for env, reply in zip(envs, replies):
            env.episode.y2 = reply
            out.append(Step([], env.setup.scorer.submit(env.episode.task, reply.text), True))
        return out


def _after_turn1(envs: list[SelfCorrection], replies: list[Completion]) -> list[Step]:
    """Submit every y1, wait for the results if a model reads them, add the hints, and build the turn-2 pieces."""
    setup = envs[0].setup
    cfg = setup.cfg
    episodes = [env.episode for env in envs]
    for env, reply in zip(envs, replies):
        env.episode.y1 = reply
        env.first = setup.scorer.submit_detailed(env.episode.task, reply.text)
    if setup.waits_for_turn1:
        take_turn1(envs, cfg.error_tail_chars)
    if setup.hints is not None:
        setup.hints(episodes)
    steps = []
    for env, ep in zip(envs, episodes):
        feedback = execution_feedback(ep.task, ep.exec_status, ep.exec_tail) if cfg.policy_sees_execution else ""
        pieces = turn2_pieces(ep.task, setup.tok, setup.mode, env.prompt1, ep.y1, ep.hint_text, cfg.instruction,
                              setup.few_shot, cfg.restate_problem, feedback)
        steps.append(Step(pieces, mapped(env.first, lambda verdict: float(verdict[0])), False))
    return steps


def take_turn1(envs: Sequence[SelfCorrection], tail_chars: int) -> None:
    """Each episode's turn-1 reward, test status and the error tail a model may read (waited for)."""
    for env in envs:
        r, status, tail = env.first.result()
        env.episode.r1, env.episode.exec_status = float(r), status
        env.episode.exec_tail = tail[-tail_chars:] if tail_chars > 0 else ""
