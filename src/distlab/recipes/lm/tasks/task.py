"""The one task record every source (MBPP, HumanEval, synthetic) is turned into.

Keeping a single shape lets the GRPO and SCoRe recipes, the sandbox and the evaluators ignore where a problem came
from: the policy sees ``prompt``; the sandbox runs the extracted program followed by ``tests``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Task:
    """A code-writing problem.

    ``prompt`` shows the problem and at most one test (``visible_test``), so a program fitted to the asserts it was
    shown still fails ``tests``, which hold every assert (the visible one included) plus any imports or setup they
    need and are run after the program, in the same namespace. ``solution`` is a reference program that passes
    ``tests``; it is never shown to the policy (it serves self-checks and supervised warm-up).
    """

    task_id: str
    prompt: str
    entry_point: str | None
    tests: str
    visible_test: str
    source: str
    solution: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON (rollout logs, evaluation dumps)."""
        return asdict(self)
