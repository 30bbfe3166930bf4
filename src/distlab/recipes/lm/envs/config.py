"""``env.*``: which environment a GRPO episode plays, and its limits (checked before any process starts:
:mod:`.checks`).

Names follow what verl and TRL users write: an environment by name and a bound on the policy's turns
(verl's ``multi_turn.max_assistant_turns``), and a bound on what a tool or test answers (verl's
``max_tool_response_length``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EnvConfig:
    name: str = ""  # "" = one reply per prompt (no environment); code_feedback | math_tool (lm/envs/)
    max_turns: int = 3  # the policy's replies per episode at most, the first included
    max_observation_chars: int = 400  # of a failing test's error or a tool's output shown to the next turn
    max_observation_tokens: int = 256  # an environment's answer longer than this loses its middle (sizes the cache)
    show_failing_test: bool = True  # code_feedback: show the failing assert's source (false: only the error)
