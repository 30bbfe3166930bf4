"""A user's own tasks from JSONL (standard and conversational layouts) train GRPO with no code change."""

import json
import sys
from pathlib import Path

import pytest

from distlab.errors import DistlabError
from distlab.recipes.lm.tasks import load_tasks

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
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


@pytest.mark.parametrize("rows, message", [
    (["{not json"], "mine.jsonl:1: not JSON"),
    ([ROWS[0], {"prompt": "p"}], "mine.jsonl:2: missing 'tests'"),
    ([{"prompt": [], "tests": "assert 1"}], "'prompt' must be a non-empty string"),
    ([{"prompt": "p", "tests": "assert 1", "task_id": "a"}, {"prompt": "q", "tests": "assert 1", "task_id": "a"}],
     "task_id 'a' appears twice"),
    ([], "holds no tasks"),
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
