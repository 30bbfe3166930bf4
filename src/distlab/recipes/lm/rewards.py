"""Execution rewards: each completion's program runs against all of its task's tests in the sandbox.

Scoring runs in a thread pool beside the trainer, so the programs of one generation chunk execute while
the next chunk is sampled. The trainer process only ever starts sandbox processes by exec; no program
text runs in it. The pool's threads share the counters, so every write to them holds the lock.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

from distlab.recipes.lm.sandbox import Sandbox, SandboxConfig
from distlab.recipes.lm.tasks import Task
from distlab.recipes.lm.tasks.prompts import build_program


class Verdict(NamedTuple):
    """How one completion fared: its reward, the sandbox's status and the tail of what it printed to stderr."""

    reward: float
    status: str
    stderr_tail: str


class RewardScorer:
    """``submit(task, completion) -> Future[float]``: 1.0 when every hidden test passed, else 0.0.

    ``submit_detailed`` gives the whole :class:`Verdict` (SCoRe's guidance may see how turn 1 failed).
    """

    def __init__(self, config: SandboxConfig, mode: str) -> None:
        self.sandbox = Sandbox(config)
        self.mode = mode
        self.pool = ThreadPoolExecutor(self.sandbox.config.workers, thread_name_prefix="distlab-reward")
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def submit(self, task: Task, completion: str) -> Future:
        return self.pool.submit(lambda: self.verdict(task, completion).reward)

    def submit_detailed(self, task: Task, completion: str) -> Future:
        return self.pool.submit(self.verdict, task, completion)

    def verdict(self, task: Task, completion: str) -> Verdict:
        """Runs the completion's program against the task's tests (in the calling thread)."""
        program = build_program(task, completion, self.mode)
        if not program:
            with self._lock:
                self.counts["no_code"] += 1
            return Verdict(0.0, "no_code", "no Python code was found in the attempt")
        result = self.sandbox.run(program, task.tests)
        return Verdict(1.0 if result.passed else 0.0, result.status, result.stderr_tail)

    def take_counts(self) -> dict[str, float]:
        """Counts since the last call (timeouts, suspected hacks, programs with no code...)."""
        stats = self.sandbox.take_stats()
        with self._lock:
            no_code = float(self.counts.pop("no_code", 0))
        return {"sandbox_runs": float(stats.get("runs", 0)), "sandbox_timeouts": float(stats.get("timeout", 0)),
                "sandbox_memory": float(stats.get("memory", 0)),
                "suspected_hacks": float(stats.get("suspected_hacks", 0)), "no_code": no_code}

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.sandbox.close()
