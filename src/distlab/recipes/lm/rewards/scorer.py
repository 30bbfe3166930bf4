"""Execution rewards: each completion's program runs against all of its task's tests in the sandbox.

Scoring runs in a thread pool beside the trainer, so the programs of one generation chunk execute while
the next chunk is sampled. The trainer process only ever starts sandbox processes by exec; no program
text runs in it. A math task (``kind="math"``) needs no sandbox: its completion's final answer is compared with the
task's ``answer`` as text (:func:`~distlab.recipes.lm.tasks.math_answer.check_answer`), nothing is executed.
The pool's threads share the counters, so every write to them holds the lock.
"""

from __future__ import annotations

import ast
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

from distlab.recipes.lm.tasks import Task
from distlab.recipes.lm.tasks.math_answer import check_answer
from distlab.recipes.lm.tasks.prompts import build_program
from distlab.sandbox import Sandbox, SandboxConfig
from distlab.sandbox.config import per_rank


class Verdict(NamedTuple):
    """How one completion fared: its reward, the sandbox's status and the tail of what it printed to stderr."""

    reward: float
    status: str
    stderr_tail: str


class Judging(NamedTuple):
    """Another harness's way of judging a completion (an evaluation's ``evaluation.harness``): the program it makes
    of the completion, the tests that program must pass, and the run's time limit (None: ``sandbox.timeout_s``).
    Without one, a completion is judged as training judges it (:func:`build_program`, ``task.tests``)."""

    program: Callable[[Task, str], str]
    tests: Callable[[Task], str]
    time_limit: Callable[[Task], float | None]


def split_tests(tests: str) -> list[str]:
    """One tests file per top-level ``assert``, each with every other statement (imports, setup) kept in place.

    Fewer than two asserts, or tests that do not parse: the file as it is, alone (then partial credit is 0 or 1).
    """
    try:
        body = ast.parse(tests).body
    except SyntaxError:
        return [tests]
    asserts = [i for i, node in enumerate(body) if isinstance(node, ast.Assert)]
    if len(asserts) < 2:
        return [tests]
    parts = [ast.get_source_segment(tests, node) or ast.unparse(node) for node in body]
    return ["\n".join(p for i, p in enumerate(parts) if i == keep or i not in asserts) + "\n" for keep in asserts]


class RewardScorer:
    """``submit(task, completion) -> Future[float]``: 1.0 when every hidden test passed, else 0.0.

    ``submit_fraction`` gives partial credit instead: the fraction of the tests' asserts that pass.

    ``submit_detailed`` gives the whole :class:`Verdict` (SCoRe's guidance may see how turn 1 failed).
    """

    def __init__(self, config: SandboxConfig, mode: str, ranks_on_node: int = 1) -> None:
        self.sandbox = Sandbox(per_rank(config, ranks_on_node))
        self.mode = mode
        self.pool = ThreadPoolExecutor(self.sandbox.config.workers, thread_name_prefix="distlab-reward")
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def submit(self, task: Task, completion: str, judging: Judging | None = None) -> Future:
        return self.pool.submit(lambda: self.verdict(task, completion, judging).reward)

    def submit_detailed(self, task: Task, completion: str) -> Future:
        return self.pool.submit(self.verdict, task, completion)

    def submit_fraction(self, task: Task, completion: str, whole: Future | None = None) -> Future:
        """Partial credit, the fraction of test asserts passed (``tests_fraction``); see :meth:`fraction`."""
        return self.pool.submit(self.fraction, task, completion, whole)

    def fraction(self, task: Task, completion: str, whole: Future | None = None) -> float:
        """1.0 when the tests pass as a whole, else the fraction of asserts that pass, each run on its own.

        Each assert runs as its own sandbox job after the program (with the tests' other statements, as
        :func:`split_tests` cuts them); the result is capped below 1 when the whole file failed, so only a program
        that passes ``tests`` gets full credit. ``whole``: the ``tests`` reward's future for the same completion,
        when that reward is computed anyway (it was submitted first, so it is running or done: no deadlock).
        """
        passed = whole.result() if whole is not None else self.verdict(task, completion).reward
        if passed == 1.0 or task.kind == "math":  # a final answer is right or wrong: no partial credit
            return float(passed)
        jobs = split_tests(task.tests)
        program = build_program(task, completion, self.mode)
        if len(jobs) < 2 or not program:
            return 0.0
        results = self.sandbox.run_many([(program, tests) for tests in jobs])
        return min(sum(r.passed for r in results), len(jobs) - 1) / len(jobs)

    def verdict(self, task: Task, completion: str, judging: Judging | None = None) -> Verdict:
        """Runs the completion's program against the task's tests (in the calling thread), or as ``judging`` says;
        checks a math task's final answer instead (no sandbox)."""
        if task.kind == "math":
            reward, status, detail = check_answer(completion, task.answer)
            if status == "no_answer":  # counted with programs that hold no code: nothing usable came out
                with self._lock:
                    self.counts["no_code"] += 1
            return Verdict(reward, status, detail)
        program = judging.program(task, completion) if judging else build_program(task, completion, self.mode)
        if not program:
            with self._lock:
                self.counts["no_code"] += 1
            return Verdict(0.0, "no_code", "no Python code was found in the attempt")
        if judging:
            result = self.sandbox.run(program, judging.tests(task), judging.time_limit(task))
        else:
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
