"""What the environments of a run work with, built once per run and shared by every episode."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from distlab.recipes.lm.envs.config import EnvConfig
from distlab.recipes.lm.rewards.scorer import RewardScorer
from distlab.recipes.lm.tasks import Task


@dataclass(frozen=True)
class EnvContext:
    """The policy's tokenizer and prompt mode (``chat`` or ``text``), the few-shot examples its prompts show, the
    sandbox every program and tool call runs in (through ``scorer``) and the ``env.*`` settings."""

    tokenizer: Any
    mode: str
    few_shot: Sequence[Task]
    scorer: RewardScorer
    config: EnvConfig
