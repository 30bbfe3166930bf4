"""The one task record every source (MBPP, HumanEval, synthetic) is turned into.

Keeping a single shape lets the GRPO and SCoRe recipes, the sandbox and the evaluators ignore where a problem came
from: the policy sees ``prompt``; the sandbox runs the extracted program followed by ``tests``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Task:
    """A code-writing problem, or a math problem with a final answer.

    ``prompt`` shows the problem and at most one test (``visible_test``), so a program fitted to the asserts it was
    shown still fails ``tests``, which hold every assert (the visible one included) plus any imports or setup they
    need and are run after the program, in the same namespace. ``solution`` is a reference program that passes
    ``tests``; it is never shown to the policy (it serves self-checks and supervised warm-up).

    A math task (``kind="math"``) has no tests: its ``answer`` is compared with the final answer of the completion
    (:mod:`.math_answer`, pure Python, no sandbox); ``solution`` is a worked solution ending in that answer.
    """

    task_id: str
    prompt: str
    entry_point: str | None
    tests: str
    visible_test: str
    source: str
    solution: str = ""
    kind: str = "code"  # "code": run against ``tests`` in the sandbox; "math": the final answer checked
    answer: str = ""  # math: the reference final answer (a number or simple expression), compared without a sandbox

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON (rollout logs, evaluation dumps)."""
        return asdict(self)
