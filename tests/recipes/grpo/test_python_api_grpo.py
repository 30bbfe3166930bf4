"""``distlab.train("grpo", ...)`` from Python: a reward function written in this session and a list of task dicts
train the tiny model in this process; the reward is really called on our own tasks and is what the advantages use;
its failure is one line; several processes refuse it with the fix."""

import importlib.util
import json

import pytest

pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")
assert importlib.util.find_spec("distlab.recipes.grpo")

from distlab import train  # noqa: E402
from distlab.errors import DistlabError  # noqa: E402

TINY = {"model.source": "tiny:llama-2l", "model.prompt_mode": "text", "prompts_per_step": 2, "num_generations": 4,
        "micro_batch_size": 4, "sampling.max_completion_length": 16, "task.eval_size": 2, "task.eval_split": "train",
        "task.eval_families": "add_const", "sft_steps": 0, "lr": 1e-3, "log.every": 1, "log.progress": False,
        "sandbox.timeout_s": 3, "evaluation.before": False}
TASKS = [{"task_id": f"inc{k}", "prompt": f"Write f(x) that returns x + {k}.", "tests": f"assert f(1) == {1 + k}",
          "entry_point": "f", "solution": f"def f(x):\n    return x + {k}\n"} for k in range(1, 5)]


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_session_reward_and_task_dicts_train_grpo_in_process(here):
    seen = []

    def brevity(prompt, completion, task):  # defined here: only this process knows it
        seen.append((task.task_id, completion))
        return -len(completion) / 100

    got = train("grpo", {**TINY, "steps": 2}, reward_funcs=[brevity], tasks=TASKS)
    assert got["status"] == "completed" and got["step"] == 2
    # called on every sampled completion of our own tasks: 2 steps x 2 prompts x 4 generations
    assert len(seen) == 2 * 2 * 4 and {tid for tid, _ in seen} <= {t["task_id"] for t in TASKS}
    [run] = [p for p in (here / "runs").iterdir() if p.name.startswith("grpo-")]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if r.get("split") == "train"]
    assert len(train_rows) == 2
    for row, step in zip(train_rows, (seen[:8], seen[8:])):  # the logged reward is ours, per step
        assert row["reward_mean"] == pytest.approx(sum(-len(c) / 100 for _, c in step) / 8, abs=1e-6)
        assert row["rewards/distlab.api:brevity"] == pytest.approx(row["reward_mean"], abs=1e-6)
    config = (run / "config.yaml").read_text()
    assert "distlab.api:brevity" in config and "/.tasks/tasks-" in config  # the config names both, as a file would


def test_a_failing_reward_is_one_line_and_bad_tasks_are_named(here):
    def boom(prompt, completion, task):
        raise ValueError("no score today")

    with pytest.raises(DistlabError, match="reward distlab.api:boom raised ValueError: no score today"):
        train("grpo", {**TINY, "steps": 1}, reward_funcs=[boom], tasks=TASKS)
    with pytest.raises(DistlabError, match=r"tasks\[1\]: missing 'tests'"):
        train("grpo", {**TINY, "steps": 1}, tasks=[TASKS[0], {"prompt": "no tests"}])
    with pytest.raises(DistlabError, match="unknown input task_list"):
        train("grpo", {**TINY, "steps": 1}, task_list=TASKS)


def test_several_processes_refuse_a_session_reward_before_starting(here):
    with pytest.raises(DistlabError, match="the 2 processes the launcher starts cannot import it"):
        train("grpo", {**TINY, "steps": 1}, procs=2, reward_funcs=[lambda prompt, completion, task: 1.0])
    assert not (here / "runs").exists() or not any((here / "runs").glob("grpo-*"))


def test_the_readme_python_example_runs_as_written(here):
    """The "From Python (notebooks)" example of docs/commands.md (moved there from the README), run verbatim (its
    smoke=True keeps it to a few minutes)."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[3] / "docs" / "commands.md").read_text()
    section = page[page.index("## From Python (notebooks)"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    scope: dict = {}
    exec(compile(code, "docs/commands.md", "exec"), scope)
    assert scope["summary"]["status"] == "completed" and scope["summary"]["step"] == 2
    assert "pass@1" in scope["summary"]["eval"]
