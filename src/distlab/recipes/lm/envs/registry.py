"""The environments ``env.name`` picks, by name: each a class built from a task and the run's :class:`EnvContext`."""

from __future__ import annotations

from collections.abc import Callable

from distlab.recipes.lm.envs.api import Env
from distlab.recipes.lm.envs.code_feedback import CodeFeedback
from distlab.recipes.lm.envs.context import EnvContext
from distlab.recipes.lm.envs.math_tool import MathTool
from distlab.recipes.lm.tasks import Task

ENVS: dict[str, type[Env]] = {"code_feedback": CodeFeedback, "math_tool": MathTool}


def env_factory(name: str) -> Callable[[Task, EnvContext], Env]:
    """The environment class of ``name`` (checked before launch by :func:`~.checks.check_env`)."""
    return ENVS[name]
