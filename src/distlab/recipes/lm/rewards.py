"""Execution rewards: each completion's program runs against all of its task's tests in the sandbox.

Scoring runs in a thread pool beside the trainer, so the programs of one generation chunk execute while
the next chunk is sampled. The trainer process only ever starts sandbox processes by exec; no program
text runs in it.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor

from distlab.recipes.lm.sandbox import Sandbox, SandboxConfig
from distlab.recipes.lm.tasks import Task
from distlab.recipes.lm.tasks.prompts import build_program


class RewardScorer:
    """``submit(task, completion) -> Future[float]``: 1.0 when every hidden test passed, else 0.0."""

    def __init__(self, config: SandboxConfig, mode: str) -> None:
        self.sandbox = Sandbox(config)
        self.mode = mode
        self.pool = ThreadPoolExecutor(self.sandbox.config.workers, thread_name_prefix="distlab-reward")
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def submit(self, task: Task, completion: str) -> Future:
        return self.pool.submit(self._score, task, completion)

    def _score(self, task: Task, completion: str) -> float:
        program = build_program(task, completion, self.mode)
        if not program:
            with self._lock:
                self.counts["no_code"] += 1
            return 0.0
        result = self.sandbox.run(program, task.tests)
        return 1.0 if result.passed else 0.0

    def take_counts(self) -> dict[str, float]:
        """Counts since the last call (timeouts, suspected hacks, programs with no code...)."""
        stats = self.sandbox.take_stats()
        with self._lock:
            no_code = float(self.counts.pop("no_code", 0))
        out = {"sandbox_runs": float(stats.get("runs", 0)), "sandbox_timeouts": float(stats.get("timeout", 0)),
               "sandbox_memory": float(stats.get("memory", 0)),
               "suspected_hacks": float(stats.get("suspected_hacks", 0)), "no_code": no_code}
        return out

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.sandbox.close()
