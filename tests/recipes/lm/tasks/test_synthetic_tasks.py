"""Synthetic function-writing families: determinism, held-out families, and hidden tests that resist fitting."""

from __future__ import annotations

import ast
import re

import pytest

from distlab.errors import DistlabError
from distlab.recipes.lm.tasks import FAMILIES, FAMILIES_EVAL, FAMILIES_TRAIN, load_tasks, synthetic_tasks


def _asserts(code: str) -> list[ast.Assert]:
    return [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Assert)]


@pytest.fixture(scope="module")
def tasks():
    return synthetic_tasks(len(FAMILIES) * 12, seed=3, families="all")


def test_families_split_is_disjoint_and_complete():
    assert set(FAMILIES_TRAIN).isdisjoint(FAMILIES_EVAL)
    assert set(FAMILIES_TRAIN) | set(FAMILIES_EVAL) == set(FAMILIES)
    assert len(FAMILIES_TRAIN) >= 8 and len(FAMILIES_EVAL) >= 4


def test_deterministic_and_independent_of_count():
    a = synthetic_tasks(30, seed=7)
    assert a == synthetic_tasks(30, seed=7)
    assert a[:10] == synthetic_tasks(10, seed=7)
    assert a != synthetic_tasks(30, seed=8)
    assert {t.source.split(":")[1] for t in a} == set(FAMILIES_TRAIN)
    assert {t.source.split(":")[1] for t in load_tasks("synthetic", "eval", n=12)} == set(FAMILIES_EVAL)


def test_prompt_is_short_regular_and_shows_one_assert(tasks):
    for t in tasks:
        assert re.fullmatch(r"Write a function f\((x|s|xs)\) that [^\n]+\.\nExample: assert f\(.+\) == .+", t.prompt)
        assert t.prompt.endswith(t.visible_test) and len(_asserts(t.visible_test)) == 1
        assert len(_asserts(t.tests)) >= 5 and t.visible_test in t.tests.splitlines()
        assert t.entry_point == "f" and len(t.prompt) < 120


def test_reference_passes_and_wrong_solutions_fail(tasks, run_trusted):
    for t in tasks:
        assert run_trusted(t.solution, t.tests) is None, t.task_id
        arg = re.search(r"f\((\w+)\)", t.prompt).group(1)
        assert run_trusted(f"def f({arg}):\n    return None\n", t.tests) is not None
        assert run_trusted(f"def f({arg}):\n    return {arg}\n", t.tests) is not None, t.task_id


def test_special_casing_the_visible_assert_fails_hidden_tests(tasks, run_trusted):
    for t in tasks:
        call = _asserts(t.visible_test)[0].test
        arg_src = ast.unparse(call.left.args[0])
        out_src = ast.unparse(call.comparators[0])
        arg = re.search(r"f\((\w+)\)", t.prompt).group(1)
        fitted = f"def f({arg}):\n    if {arg} == {arg_src}:\n        return {out_src}\n    return {out_src}\n"
        assert run_trusted(fitted, t.visible_test) is None  # it does pass what it was shown ...
        assert run_trusted(fitted, t.tests) is not None, t.task_id  # ... and nothing else


def test_bad_family_names():
    with pytest.raises(DistlabError, match="add_const"):
        synthetic_tasks(3, families=["add_cnst"])
    with pytest.raises(DistlabError, match="task.n"):
        load_tasks("synthetic", "train")
