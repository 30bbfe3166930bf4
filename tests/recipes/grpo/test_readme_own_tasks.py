"""The "Your own tasks" block of the GRPO guide (docs/recipes/grpo.md, moved there from the README), run as a user
would: every command line as written, with only what a 2-core CPU needs swapped in (a tiny model for
``/path/to/hf_model``, the CPU for ``--gpus 1``, two steps and short completions appended). A renamed key, command or
flag in that block fails here."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from clitools import run_cli, summary

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "recipes" / "grpo.md"
SMALL = ["steps=2", "prompts_per_step=2", "num_generations=2", "micro_batch_size=4",
         "sampling.max_completion_length=24", "evaluation.before=false", "log.progress=false", "sandbox.timeout_s=3",
         "model.prompt_mode=text"]


def _commands() -> list[list[str]]:
    """The block's command lines, continuation lines joined, comments dropped."""
    text = GUIDE.read_text()
    block = re.search(r"^## Your own tasks\n+```bash\n(.*?)```", text, re.S | re.M).group(1)
    lines = block.replace("\\\n", " ").splitlines()
    return [shlex.split(ln, comments=True) for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def test_the_readme_own_tasks_block_runs_as_written(tmp_path):
    cmds = _commands()
    assert [c[:2] for c in cmds] == [["distlab", "train"], ["distlab", "eval"], ["distlab", "export"],
                                     ["distlab", "data"]]
    train, evaluate, export, data = cmds
    # the last line makes the task file the others read: a built-in set as rows of the user's schema
    data = [a.replace("mbpp", "synthetic") if a == "mbpp" else a for a in data]
    run_cli([*data[1:], "--n", "12"], tmp_path)
    rows = (tmp_path / "mbpp_train.jsonl").read_text().splitlines()
    (tmp_path / "my_tasks.jsonl").write_text("\n".join(rows[:8]) + "\n")
    (tmp_path / "my_heldout.jsonl").write_text("\n".join(rows[8:]) + "\n")
    pkg = tmp_path / "my_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    signature = re.search(r"`(def score\(.*?\)) -> float`", GUIDE.read_text()).group(1)  # as the guide says
    (pkg / "rewards.py").write_text(f"{signature}:\n    return 0.5\n")

    args = [a.replace("/path/to/hf_model", "tiny:llama-2l") for a in train[1:] if a not in ("--gpus", "1")]
    assert "model.source=tiny:llama-2l" in args and "reward_funcs=[tests,format,my_pkg.rewards:score]" in args
    run_cli([*args, *SMALL, "run.name=mine"], tmp_path, env={"PYTHONPATH": str(tmp_path)})
    run_dir = tmp_path / "runs" / "mine"
    s = summary(run_dir)
    assert s["status"] == "completed" and s["step"] == 2
    logged = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("rewards/my_pkg.rewards:score") == 0.5 for r in logged), logged[0]  # the user's reward ran

    ev = [a.replace("runs/<name>", str(run_dir)) for a in evaluate[1:]]
    run_cli(ev, tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert list((run_dir / "eval").glob("*/eval.json"))
    ex = [a.replace("runs/<name>", str(run_dir)) for a in export[1:]]
    run_cli(ex, tmp_path)
    assert (run_dir / "hf" / "config.json").exists()
