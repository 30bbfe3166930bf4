"""Reward functions by name, summed with weights: TRL's ``reward_funcs``/``reward_weights``.

A completion's reward is ``sum_i w_i r_i``. Built-ins: ``tests`` (1 when every hidden test passes, run in the
sandbox), ``tests_fraction`` (partial credit: the fraction of the tests' asserts that pass, each assert run on its
own after the program; 1 only when ``tests`` is 1 -- open-r1's ``code_reward``, verl's continuous code score),
``format`` (1 when the completion holds a program the extractor can take out; for a math task, a boxed or stated
final answer), ``overlong`` (DAPO's soft length penalty: 0 up to ``max_completion_length - overlong_buffer`` tokens,
then falling linearly to -1 at the limit). For a math task ``tests`` is 1 when the final answer matches (no sandbox)
and ``tests_fraction`` equals it. A user's own function is named by import path, ``my_pkg.rewards:score``, and called as
``score(prompt=str, completion=str, task=Task) -> float`` in the reward workers, each call bounded by
``reward_timeout_s``. Names are resolved before any process starts, so a typo or an import error is one line.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from distlab.errors import DistlabError, InRunError, near_matches
from distlab.recipes.lm.tasks import Task
from distlab.recipes.lm.tasks.math_answer import extract_answer
from distlab.recipes.lm.tasks.prompts import build_program

BUILTIN = ("tests", "tests_fraction", "format", "overlong")


@dataclass(frozen=True)
class Sample:
    """What a reward function may look at: the task, the prompt text, the completion and its length."""

    task: Task
    prompt: str
    completion: str
    tokens: int
    truncated: bool


def resolve(name: str) -> Callable[..., float] | None:
    """The user function behind ``module:attr``; None for a built-in; a one-line error for anything else."""
    if name in BUILTIN:
        return None
    if ":" not in name:
        hint = near_matches(name, BUILTIN)
        raise DistlabError(f"reward_funcs: {name!r} is neither a built-in ({', '.join(BUILTIN)}) nor an import path "
                           f"module:function" + (f"; did you mean {hint[0]}?" if hint else ""))
    module, _, attr = name.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise DistlabError(f"reward_funcs: cannot load {name} ({type(exc).__name__}: {exc}); check the module is "
                           f"importable (on PYTHONPATH) and defines {attr}") from None
    if not callable(fn):
        raise DistlabError(f"reward_funcs: {name} is a {type(fn).__name__}, not a function")
    return fn


def check_rewards(names: Sequence[str], weights: Sequence[float], timeout_s: float) -> None:
    """Before launch: every name resolves, weights match them one to one, the timeout is positive."""
    if not names:
        raise DistlabError("reward_funcs is empty; name at least one, e.g. reward_funcs=[tests]")
    if weights and len(weights) != len(names):
        raise DistlabError(f"reward_weights has {len(weights)} values for {len(names)} reward_funcs; give one weight "
                           f"per function, or none (all 1)")
    if any(not math.isfinite(w) for w in weights):
        raise DistlabError(f"reward_weights={list(weights)} must be finite numbers")
    if not timeout_s > 0:
        raise DistlabError(f"reward_timeout_s={timeout_s} must be > 0")
    for name in names:
        resolve(name)


def format_reward(sample: Sample, mode: str) -> float:
    if sample.task.kind == "math":
        return 1.0 if extract_answer(sample.completion, strict=True) is not None else 0.0
    return 1.0 if build_program(sample.task, sample.completion, mode) else 0.0


def overlong_penalty(tokens: int, max_len: int, buffer: int) -> float:
    """DAPO's soft overlong punishment: 0 below ``max_len - buffer``, linear to -1 at ``max_len``, -1 beyond."""
    start = max_len - buffer
    if tokens <= start:
        return 0.0
    if tokens >= max_len:
        return -1.0
    return (start - tokens) / buffer


class RewardFunctions:
    """Every configured reward of a batch of samples; ``tests`` futures come from the sandbox scorer."""

    def __init__(self, names: Sequence[str], weights: Sequence[float], *, mode: str, max_len: int,
                 overlong_buffer: int, timeout_s: float, pool: ThreadPoolExecutor) -> None:
        self.names = list(names)
        self.weights = [float(w) for w in weights] or [1.0] * len(self.names)
        self.user = {n: resolve(n) for n in self.names}
        self.mode, self.max_len, self.buffer, self.timeout_s, self.pool = mode, max_len, overlong_buffer, timeout_s, pool

    def submit(self, sample: Sample, tests: Callable[[], Future],
               tests_fraction: Callable[[Future | None], Future] | None = None) -> dict[str, Future | float]:
        """Start every reward of one sample: ``tests()`` submits the sandbox run (only when ``tests`` is named),
        ``tests_fraction(whole)`` the partial-credit runs (handed the ``tests`` future when there is one)."""
        out: dict[str, Future | float] = {}
        if "tests" in self.names:  # first: tests_fraction reuses its run
            out["tests"] = tests()
        for name in self.names:
            if name == "tests":
                continue
            if name == "tests_fraction":
                if tests_fraction is None:
                    raise DistlabError("reward tests_fraction is not available in this recipe; use tests")
                out[name] = tests_fraction(out.get("tests"))
            elif name == "format":
                out[name] = format_reward(sample, self.mode)
            elif name == "overlong":
                out[name] = overlong_penalty(sample.tokens, self.max_len, self.buffer)
            else:
                out[name] = self.pool.submit(self.user[name], prompt=sample.prompt, completion=sample.completion,
                                             task=sample.task)
        return out

    def collect(self, pending: list[dict[str, Future | float]]) -> dict[str, list[float]]:
        """Per reward name, the value of every sample (waiting for futures; a user function's error is one line)."""
        values: dict[str, list[float]] = {n: [] for n in self.names}
        for started in pending:
            for name, value in started.items():
                values[name].append(self._value(name, value))
        return values

    def total(self, values: dict[str, list[float]]) -> list[float]:
        n = len(next(iter(values.values()))) if values else 0
        return [sum(w * values[name][i] for name, w in zip(self.names, self.weights)) for i in range(n)]

    def _value(self, name: str, value: Future | float) -> float:
        if not isinstance(value, Future):
            return float(value)
        try:
            got = value.result(timeout=self.timeout_s if name not in BUILTIN else None)
        except FutureTimeout:
            raise InRunError(f"reward {name} did not return within reward_timeout_s={self.timeout_s}; make it "
                               f"faster or raise reward_timeout_s") from None
        except DistlabError:
            raise
        except Exception as exc:  # the user's function: its own error, said in one line
            raise InRunError(f"reward {name} raised {type(exc).__name__}: {exc}") from None
        try:
            got = float(got)
        except (TypeError, ValueError):
            raise InRunError(f"reward {name} returned {type(got).__name__} {got!r}, not a number") from None
        if not math.isfinite(got):
            raise InRunError(f"reward {name} returned {got}, not a finite number")
        return got
