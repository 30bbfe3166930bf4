"""How an evaluation asks a model for a program and judges what it wrote: ``evaluation.harness``.

- ``distlab`` (the default, what every earlier figure used): the prompts, stop strings, code extraction and
  sandbox judging that training uses (:mod:`~distlab.recipes.lm.tasks.prompts`, :func:`~distlab.recipes.lm.tasks.
  extract.extract_code`, exact asserts, ``sandbox.timeout_s`` per program).
- ``evalplus``: EvalPlus's prompt format, stop strings and code extraction, its float tolerance and its time limit
  per problem (:mod:`.evalplus`), so that base figures can be set beside the published ones.

docs/evaluation.md lists every difference between the two and the test that shows it.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from distlab.recipes.lm.tasks.task import Task

HARNESSES = ("distlab", "evalplus")


@dataclass(frozen=True)
class HarnessPlan:
    """One evaluation's prompts (in the order of its tasks), the strings its generation stops at, and how a
    completion of a task is sent to be judged (a future of its 0/1 reward)."""

    prompts: list[str]
    stops: tuple[str, ...]
    submit: Callable[[Task, str], Future]
