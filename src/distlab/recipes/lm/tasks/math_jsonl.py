"""A user's math problems from JSONL (``task.train=FILE.jsonl``): GSM8K's and MATH's layouts, detected per file.

GSM8K: ``{"question": ..., "answer": "... #### 72"}``: the final answer follows the last ``####``; the rest of the
answer (calculator marks ``<<48/2=24>>`` removed) is the worked solution. MATH: ``{"problem": ..., "solution":
"... \\boxed{3/4} ..."}``: the final answer is the last ``\\boxed{}`` of the solution, or the row's ``answer`` when
given (MATH-500's layout). Optional ``task_id`` (or ``unique_id``). Each line becomes a math row of the task
schema (``prompt``, ``answer``, ``solution``: :mod:`.jsonl`), which makes the task. The file's first row picks the
layout (a row with ``prompt`` is already in the task schema); every line is checked before any process starts, an
error names ``file:line``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from distlab.errors import DistlabError
from distlab.recipes.lm.tasks.jsonl import Row, answer_text, json_rows, task_from_row, unique_tasks
from distlab.recipes.lm.tasks.math_answer import last_boxed
from distlab.recipes.lm.tasks.task import Task

LAYOUTS = {"gsm8k": ("question", "answer"), "math": ("problem", "solution")}
_CALC = re.compile(r"<<[^<>]*>>")


SCHEMA = "schema"  # the task schema of :mod:`.jsonl` (code rows, and math rows with ``prompt`` and ``answer``)


def jsonl_layout(path: str | Path) -> str:
    """``"gsm8k"``, ``"math"`` or ``SCHEMA`` (the :mod:`.jsonl` layout, also for files it will reject)."""
    p = Path(path)
    if not p.is_file():
        return SCHEMA
    with p.open(encoding="utf-8") as fh:
        for text in fh:
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError:
                return SCHEMA  # the schema's loader names the line
            if isinstance(row, dict) and "prompt" not in row:
                if "question" in row:
                    return "gsm8k"
                if "problem" in row:
                    return "math"
            return SCHEMA
    return SCHEMA


def _text(row: dict, key: str, where: str, layout: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        q, a = LAYOUTS[layout]
        raise DistlabError(f"{where}: {layout} layout: {key!r} must be a non-empty string (each line needs {q!r} "
                           f"and {a!r})")
    return value


def schema_row(row: Any, where: str, layout: str) -> Row:
    """A GSM8K or MATH line as a math row of the task schema; errors name the layout's own keys."""
    if not isinstance(row, dict):
        raise DistlabError(f"{where}: each line must be a JSON object, got {type(row).__name__}")
    q_key, a_key = LAYOUTS[layout]
    question, worked = _text(row, q_key, where, layout), _text(row, a_key, where, layout)
    if layout == "gsm8k":
        if "####" not in worked:
            raise DistlabError(f"{where}: gsm8k layout: 'answer' has no '#### <final answer>' line")
        body, _, final = worked.rpartition("####")
        answer = final.strip()
        solution = f"{_CALC.sub('', body).strip()}\nThe answer is {answer}.".strip()
    else:
        given = row.get("answer")
        if given is not None and not isinstance(given, str):  # a number (MATH-500 exports) or a refused NaN
            given = answer_text(given, where)
        answer = given.strip() if isinstance(given, str) and given.strip() else (last_boxed(worked) or "").strip()
        if not answer:
            raise DistlabError(f"{where}: math layout: 'solution' has no \\boxed{{...}} final answer (or give "
                               f"'answer')")
        solution = worked.strip()
    out: Row = {"prompt": question, "answer": answer, "solution": solution}
    key = next((k for k in ("task_id", "unique_id") if k in row), None)  # MATH-500 names its ids unique_id
    if key is not None:
        if not isinstance(row[key], (str, int)):
            raise DistlabError(f"{where}: 'task_id' must be a string, got {type(row[key]).__name__}")
        out["task_id"] = str(row[key])
    return out


def load_math_jsonl(path: str | Path, layout: str | None = None) -> list[Task]:
    """Every problem of the file, in order; a one-line error naming the file and line for anything malformed."""
    p = Path(path)
    layout = layout or jsonl_layout(p)
    if layout not in LAYOUTS:
        raise DistlabError(f"{p}: not a math file (rows need question/answer or problem/solution)")
    return unique_tasks(((task_from_row(schema_row(row, where, layout), where, f"{p.stem}/{n}", f"jsonl:{layout}"),
                          where) for row, where, n in json_rows(p)), f"task file {p}", "tasks")
