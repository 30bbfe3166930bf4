"""A user's own tasks from a ``datasets`` directory (``save_to_disk``), in TRL's standard and conversational layouts."""

import sys
from pathlib import Path

import pytest

from distlab.errors import DistlabError
from distlab.recipes.lm.tasks import load_tasks

datasets = pytest.importorskip("datasets", reason="the tests build their datasets with datasets (the dev extra)")

from clitools import run_cli, summary  # noqa: E402

STANDARD = [
    {"prompt": "Write a function double(x) that returns 2 * x.",
     "tests": "assert double(2) == 4\nassert double(-1) == -2", "entry_point": "double",
     "solution": "def double(x):\n    return 2 * x", "task_id": None, "difficulty": 1},
    {"prompt": "Write a function inc(x) that returns x + 1.", "tests": "assert inc(1) == 2", "entry_point": "inc",
     "solution": "def inc(x):\n    return x + 1", "task_id": "inc", "difficulty": 2},
]
CONVERSATIONAL = [
    {"prompt": [{"role": "system", "content": "You write Python."},
                {"role": "user", "content": "Write a function inc(x) that returns x + 1."}],
     "tests": ["assert inc(1) == 2", "assert inc(-1) == 0"]},  # MBPP's test_list shape: one assert per item
    {"prompt": [{"role": "user", "content": "Write a function neg(x) that returns -x."}],
     "tests": ["assert neg(2) == -2"]},
]


def _save(path: Path, rows) -> Path:
    datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


def test_the_standard_layout_loads_as_tasks(tmp_path):
    tasks = load_tasks(str(_save(tmp_path / "mine", STANDARD)), "train")
    assert [t.task_id for t in tasks] == ["mine/0", "inc"] and {t.source for t in tasks} == {"dataset"}
    assert tasks[0].prompt == STANDARD[0]["prompt"] and tasks[0].tests == STANDARD[0]["tests"]
    assert tasks[0].entry_point == "double" and tasks[1].solution == STANDARD[1]["solution"]


def test_the_conversational_layout_loads_as_tasks(tmp_path):
    tasks = load_tasks(str(_save(tmp_path / "chat", CONVERSATIONAL)), "train")
    assert tasks[0].prompt == "Write a function inc(x) that returns x + 1."  # the user turn, not the system one
    assert tasks[0].tests == "assert inc(1) == 2\nassert inc(-1) == 0" and tasks[0].entry_point is None
    assert [t.task_id for t in tasks] == ["chat/0", "chat/1"]


def test_a_dataset_dict_is_read_at_the_split(tmp_path):
    d = datasets.DatasetDict({"train": datasets.Dataset.from_list(STANDARD),
                              "test": datasets.Dataset.from_list(CONVERSATIONAL)})
    d.save_to_disk(str(tmp_path / "both"))
    assert [t.task_id for t in load_tasks(str(tmp_path / "both"), "test")] == ["both/test/0", "both/test/1"]
    assert len(load_tasks(str(tmp_path / "both"), "train", n=1)) == 1
    with pytest.raises(DistlabError, match=r"has no split 'eval' \(it has train, test\); set task.train_split"):
        load_tasks(str(tmp_path / "both"), "eval")


def test_prompt_and_answer_columns_are_math_problems(tmp_path):
    rows = [{"prompt": "What is 2 + 3?", "answer": "5"}, {"prompt": "What is 4 * 2?", "answer": "8"}]
    tasks = load_tasks(str(_save(tmp_path / "sums", rows)), "train")
    assert [(t.task_id, t.kind, t.answer, t.tests, t.source) for t in tasks] == [
        ("sums/0", "math", "5", "", "dataset"), ("sums/1", "math", "8", "", "dataset")]


@pytest.mark.parametrize("make, message", [
    (lambda tmp: tmp / "absent", "task data directory .*absent not found"),
    (lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", "is not a datasets directory .no state.json"),
    (lambda tmp: _save(tmp / "cols", [{"question": "q", "tests": "assert 1"}]), r"missing column 'prompt' \(has "
                                                                               r"question, tests\)"),
    (lambda tmp: _save(tmp / "cols2", [{"prompt": "q"}]), "missing column 'tests'"),
    (lambda tmp: _save(tmp / "blank", [{"prompt": "q", "tests": " "}]), "blank row 0: 'tests' must be non-empty"),
    (lambda tmp: _save(tmp / "dup", [{"prompt": "q", "tests": "assert 1", "task_id": "a"}] * 2),
     "row 1: task_id 'a' appears twice"),
])
def test_bad_directories_are_one_line(tmp_path, make, message):
    with pytest.raises(DistlabError, match=message) as err:
        load_tasks(str(make(tmp_path)), "train")
    assert "\n" not in str(err.value)


def test_grpo_trains_on_a_datasets_directory_and_refuses_a_bad_one_before_launch(tmp_path):
    data = _save(tmp_path / "mine", STANDARD)
    run_cli(["train", "grpo", "model.source=tiny:llama-2l", "model.prompt_mode=text", f"task.train={data}",
             f"task.eval={data}", "prompts_per_step=2", "num_generations=2", "micro_batch_size=4",
             "sampling.max_completion_length=16", "steps=1", "sft_steps=2", "log.progress=false", "run.name=mine"],
            tmp_path)
    s = summary(tmp_path / "runs" / "mine")
    assert s["status"] == "completed" and s["eval"]["n_problems"] == 2
    bad = _save(tmp_path / "bad", [{"question": "q", "tests": "assert 1"}])
    for source, message in ((bad, "missing column 'prompt'"), (tmp_path / "nowhere", "nowhere not found")):
        proc = run_cli(["train", "grpo", f"task.train={source}", "run.name=bad"], tmp_path, check=False)
        lines = [x for x in proc.stderr.splitlines() if x.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
    assert not (tmp_path / "runs" / "bad").exists()
