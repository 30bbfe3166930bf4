"""A user's own tasks from a JSONL file (``task.train=my_tasks.jsonl``): TRL's standard and conversational layouts.

One task per line. ``prompt`` is the problem: a string (TRL's standard layout) or a list of ``{"role",
"content"}`` messages (the conversational layout; the user turns are the problem, joined in order). ``tests`` is
Python run after the program (asserts; a string or a list of strings); optional: ``task_id`` (default
``<file>/<line>``), ``entry_point`` (the function the tests call), ``visible_test`` (shown in the prompt),
``solution`` (a reference program, for the warm-up). Every line is checked when the file is read, before any
process starts; an error names the line. A ``datasets`` directory with the same columns: :mod:`.saved_dataset`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from distlab.errors import DistlabError
from distlab.recipes.lm.tasks.task import Task

OPTIONAL = ("task_id", "entry_point", "visible_test", "solution")


def _prompt(value: Any, where: str) -> str:
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, list) and value and all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in value):
        turns = [str(m["content"]) for m in value if m["role"] == "user"]
        if turns:
            return "\n\n".join(turns)
    raise DistlabError(f"{where}: 'prompt' must be a non-empty string or a list of {{role, content}} messages with a "
                       f"user turn")


def _tests(value: Any, where: str) -> str:
    """Python run after the program: a string, or a list of statements (MBPP's ``test_list``) joined by lines."""
    if isinstance(value, list) and value and all(isinstance(t, str) for t in value):
        value = "\n".join(value)
    if not isinstance(value, str) or not value.strip():
        raise DistlabError(f"{where}: 'tests' must be non-empty Python (asserts run after the program), as a string "
                           f"or a list of strings")
    return value


def task_from_row(row: Any, where: str, default_id: str, source: str = "jsonl") -> Task:
    """One task from a row of the user's data (a JSONL line, a datasets row); errors name ``where``."""
    if not isinstance(row, dict):
        raise DistlabError(f"{where}: each line must be a JSON object with 'prompt' and 'tests', got "
                           f"{type(row).__name__}")
    missing = [k for k in ("prompt", "tests") if k not in row]
    if missing:
        raise DistlabError(f"{where}: missing {', '.join(repr(k) for k in missing)} (each line needs 'prompt' and "
                           f"'tests')")
    tests = _tests(row["tests"], where)
    extra = {k: row[k] for k in OPTIONAL if row.get(k) is not None}
    for key, value in extra.items():
        if not isinstance(value, str):
            raise DistlabError(f"{where}: {key!r} must be a string, got {type(value).__name__}")
    return Task(task_id=extra.get("task_id", default_id), prompt=_prompt(row["prompt"], where),
                entry_point=extra.get("entry_point"), tests=tests, visible_test=extra.get("visible_test", ""),
                source=source, solution=extra.get("solution", ""))


def load_jsonl(path: str | Path) -> list[Task]:
    """Every task of the file, in order; a one-line error naming the file and line for anything malformed."""
    p = Path(path)
    if not p.is_file():
        raise DistlabError(f"task file {p} not found (task.train/task.eval name a .jsonl file of prompt and tests)")
    return unique_tasks(((task_from_row(row, where, f"{p.stem}/{n}"), where) for row, where, n in json_rows(p)),
                        f"task file {p}", "tasks")


def json_rows(p: Path) -> Iterator[tuple[Any, str, int]]:
    """``(row, "file:line", line)`` for each non-blank line; a line that is not JSON is a one-line error."""
    with p.open(encoding="utf-8") as fh:
        for n, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            where = f"{p}:{n}"
            try:
                yield json.loads(text), where, n
            except json.JSONDecodeError as exc:
                raise DistlabError(f"{where}: not JSON ({exc.msg} at column {exc.colno})") from None


def unique_tasks(made: Iterable[tuple[Task, str]], what: str, unit: str) -> list[Task]:
    """The tasks of ``(task, where)`` pairs in order: ids must be unique (the first repeat is named where it
    stands) and there must be at least one."""
    tasks, ids = [], set()
    for task, where in made:
        if task.task_id in ids:
            raise DistlabError(f"{where}: task_id {task.task_id!r} appears twice; ids must be unique")
        ids.add(task.task_id)
        tasks.append(task)
    if not tasks:
        raise DistlabError(f"{what} holds no {unit}")
    return tasks
