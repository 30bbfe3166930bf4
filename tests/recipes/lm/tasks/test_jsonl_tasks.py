"""A user's own tasks from JSONL (standard and conversational layouts) train GRPO with no code change."""

import json
import sys
from pathlib import Path

import pytest

from distlab.errors import DistlabError
from distlab.recipes.lm.tasks import chat_messages, load_tasks, text_prompt

from clitools import run_cli, summary  # noqa: E402

ROWS = [
    {"prompt": "Write a function double(x) that returns 2 * x.", "tests": "assert double(2) == 4\nassert double(-1) == -2",
     "entry_point": "double", "solution": "def double(x):\n    return 2 * x"},
    {"prompt": [{"role": "system", "content": "You write Python."},
                {"role": "user", "content": "Write a function inc(x) that returns x + 1."}],
     "tests": "assert inc(1) == 2", "task_id": "inc", "solution": "def inc(x):\n    return x + 1"},
]


def _write(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_both_layouts_load_as_tasks(tmp_path):
    tasks = load_tasks(str(_write(tmp_path / "mine.jsonl", ROWS)), "train")
    assert [t.task_id for t in tasks] == ["mine/1", "inc"]
    assert tasks[0].entry_point == "double" and tasks[0].source == "jsonl"
    assert tasks[1].prompt == "Write a function inc(x) that returns x + 1."  # the user turn, not the system one


def test_a_visible_test_is_shown_in_the_prompt_once(tmp_path):
    rows = [{"prompt": "Write double(x).", "tests": "assert double(2) == 4\nassert double(0) == 0",
             "visible_test": "assert double(2) == 4"},
            {"prompt": "Write inc(x). Example: assert inc(1) == 2", "tests": "assert inc(1) == 2",
             "visible_test": "assert inc(1) == 2"}]
    added, kept = load_tasks(str(_write(tmp_path / "vis.jsonl", rows)), "train")
    assert added.prompt == "Write double(x).\nYour code should pass this test:\nassert double(2) == 4"
    assert kept.prompt == rows[1]["prompt"]  # already shown: not repeated
    assert "assert double(2) == 4" in text_prompt(added)  # what the policy reads


def test_a_row_with_an_answer_and_no_tests_is_a_math_problem(tmp_path):
    rows = [{"prompt": "What is 2 + 3?", "answer": 5, "solution": "2 + 3 = 5."},
            {"prompt": [{"role": "user", "content": "Half of 3?"}], "answer": "3/2", "task_id": "half"},
            {"prompt": "Write f(x) returning 1.", "tests": "assert f(0) == 1", "answer": "ignored"}]
    tasks = load_tasks(str(_write(tmp_path / "mixed.jsonl", rows)), "train")
    assert [(t.kind, t.answer, t.tests) for t in tasks] == [("math", "5", ""), ("math", "3/2", ""),
                                                            ("code", "", "assert f(0) == 1")]
    assert tasks[0].solution == "2 + 3 = 5." and tasks[1].prompt == "Half of 3?" and tasks[0].entry_point is None
    assert "\\boxed{}" in chat_messages(tasks[0])[-1]["content"]  # asked for a final answer, not for code


def test_a_row_may_name_its_source(tmp_path):
    row = {"prompt": "def inc(x):\n    \"\"\"x + 1\"\"\"\n", "tests": "assert inc(1) == 2", "entry_point": "inc",
           "source": "humaneval"}
    task = load_tasks(str(_write(tmp_path / "he.jsonl", [row, {**row, "source": None, "task_id": "b"}])), "t")
    assert [t.source for t in task] == ["humaneval", "jsonl"]
    assert text_prompt(task[0]) == row["prompt"] and text_prompt(task[1]).endswith("```python\n")


@pytest.mark.parametrize("rows, message", [
    (["{not json"], "mine.jsonl:1: not JSON"),
    ([ROWS[0], {"prompt": "p"}], "mine.jsonl:2: missing 'tests'"),
    ([{"prompt": [], "tests": "assert 1"}], "'prompt' must be a non-empty string"),
    ([{"prompt": "p", "tests": "assert 1", "task_id": "a"}, {"prompt": "q", "tests": "assert 1", "task_id": "a"}],
     "task_id 'a' appears twice"),
    ([], "holds no tasks"),
    ([{"prompt": "p", "answer": " $ "}], r"mine.jsonl:1: the final answer ' \$ ' is empty once normalised"),
    ([{"prompt": "p", "answer": ["1"]}], "mine.jsonl:1: 'answer' must be a string or a number, got list"),
    ([{"prompt": "p", "tests": "assert 1", "source": 3}], "mine.jsonl:1: 'source' must be a string"),
])
def test_malformed_files_name_the_line(tmp_path, rows, message):
    with pytest.raises(DistlabError, match=message):
        load_tasks(str(_write(tmp_path / "mine.jsonl", rows)), "train")


def test_grpo_trains_on_a_jsonl_file(tmp_path):
    data = _write(tmp_path / "mine.jsonl", ROWS)
    run_cli(["train", "grpo", "model.source=tiny:llama-2l", "model.prompt_mode=text", f"task.train={data}",
             f"task.eval={data}", "prompts_per_step=2", "num_generations=2", "micro_batch_size=4",
             "sampling.max_completion_length=16", "steps=1", "sft_steps=2", "log.progress=false", "run.name=mine"],
            tmp_path)
    s = summary(tmp_path / "runs" / "mine")
    assert s["status"] == "completed" and s["eval"]["n_problems"] == 2
    bad = run_cli(["train", "grpo", f"task.train={tmp_path / 'none.jsonl'}"], tmp_path, check=False)
    assert bad.returncode == 2 and "none.jsonl not found" in bad.stderr and not (tmp_path / "runs" / "grpo").exists()
