"""Task dicts from Python (``distlab.train("grpo", ..., tasks=[...])``) for the LM recipes' ``Recipe.python_inputs``.

The rows are checked by the one function that makes every task (``task_from_row``) and written as a task file of
the schema ``task.train=FILE.jsonl`` already reads, so a notebook's tasks take exactly the path a user's file takes:
every process reads them, ``config.yaml`` names them and ``distlab train`` with that config resumes the run. The
file's name is a digest of its rows: the same tasks give the same file and so the same run name (a rerun resumes),
other tasks another run.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from distlab.errors import DistlabError
from distlab.recipes.lm.tasks.jsonl import NEEDS, rows_text, task_from_row, unique_tasks, write_jsonl

INPUTS = {"tasks": "task.train", "eval_tasks": "task.eval"}  # keyword -> the config key its file is given to


def python_inputs(inputs: dict[str, Any], run_dir: Path) -> list[str]:
    """``tasks=`` and ``eval_tasks=`` (lists of task dicts) as ``task.train=``/``task.eval=`` files under
    ``<run.dir>/.tasks/`` (a name no run can have)."""
    out = []
    for name, rows in inputs.items():
        if name not in INPUTS:
            raise DistlabError(f"unknown input {name}=...; the LM recipes take tasks=[...] and eval_tasks=[...] (lists "
                               f"of task dicts) besides their config keys")
        if isinstance(rows, (str, bytes, dict)) or not hasattr(rows, "__iter__"):
            raise DistlabError(f"{name} must be a list of task dicts, each with {NEEDS}; got a {type(rows).__name__}")
        rows = list(rows)
        unique_tasks(((task_from_row(row, f"{name}[{i}]", f"{name}/{i}"), f"{name}[{i}]")
                      for i, row in enumerate(rows)), name, "tasks")
        try:
            text = rows_text(rows)
        except (TypeError, ValueError) as exc:
            raise DistlabError(f"{name}: a task holds a value JSON cannot write ({exc}); use text, numbers, lists "
                               f"and dicts") from None
        path = (Path(run_dir) / ".tasks" / f"{name}-{hashlib.sha1(text.encode()).hexdigest()[:12]}.jsonl").resolve()
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            write_jsonl(rows, path)
        out.append(f"{INPUTS[name]}={path}")
    return out
