"""Fixtures for the LM task tests: the MBPP folder (skip when absent) and an in-process runner for trusted code."""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from distlab.recipes.lm.tasks.mbpp import DEFAULT_MBPP_DIR

REPO = Path(__file__).resolve().parents[4]


def _run_trusted(program: str, tests: str) -> str | None:
    """None when ``program`` then ``tests`` run cleanly in one fresh namespace, else the error.

    Plain ``exec`` is fine only because the programs are our own reference solutions; model output goes through
    the sandbox.
    """
    namespace: dict = {"__name__": "__lm_task__"}
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # old solutions use invalid escapes such as '\w'; not ours to fix
            exec(compile(program, "<solution>", "exec"), namespace)
            exec(compile(tests, "<tests>", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001 - SystemExit from a solution must not end pytest
        return f"{type(exc).__name__}: {exc}"[:200]
    return None


@pytest.fixture
def run_trusted() -> Callable[[str, str], str | None]:
    return _run_trusted


@pytest.fixture
def mbpp_dir() -> Path:
    """The shared MBPP copy; tests that need it skip with the path in the reason when it is missing."""
    for base in (Path.cwd(), REPO):
        path = (base / DEFAULT_MBPP_DIR).resolve()
        if (path / "mbpp.jsonl").is_file():
            return path
    pytest.skip(f"MBPP data not found at {(REPO / DEFAULT_MBPP_DIR).resolve()} (expected mbpp.jsonl there)")
