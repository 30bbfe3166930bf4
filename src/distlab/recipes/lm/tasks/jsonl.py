"""The one row schema every task is built from: a user's JSONL file (``task.train=my_tasks.jsonl``), a ``datasets``
directory (:mod:`.saved_dataset`) and the built-in sets (MBPP, HumanEval, the code and math families), whose loaders
are adapters that yield these rows. So a built-in set written as JSONL (:func:`write_jsonl`) is a file a user can
edit and train on.

One task per line. ``prompt`` is the problem: a string (TRL's standard layout) or a list of ``{"role",
"content"}`` messages (the conversational layout; the user turns are the problem, joined in order). ``tests`` is
Python run after the program (asserts; a string or a list of strings). A row with ``answer`` and no ``tests`` is a
math problem: the final answer (a string or a number) is checked without a sandbox. Optional: ``task_id`` (default
``<file>/<line>``), ``entry_point`` (the function the tests call), ``visible_test`` (shown in the prompt),
``solution`` (a reference program or worked solution, for the warm-up) and ``source`` (default ``jsonl``; ``humaneval``
or ``mbpp-docstring`` keeps HumanEval's prompt style, a function to continue). Other keys are ignored. Every line is
checked when the file is read, before any process starts; an error names the line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from distlab.errors import DistlabError
from distlab.recipes.lm.tasks.math_answer import normalize
from distlab.recipes.lm.tasks.task import Task

Row = dict[str, Any]
OPTIONAL = ("task_id", "entry_point", "visible_test", "solution", "source")
NEEDS = "'prompt' and 'tests', or 'prompt' and 'answer' for a math problem"


def _prompt(value: Any, where: str) -> str:
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, list) and value and all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in value):
        turns = [str(m["content"]) for m in value if m["role"] == "user"]
        if turns:
            return "\n\n".join(turns)
    raise DistlabError(f"{where}: 'prompt' must be a non-empty string or a list of {{role, content}} messages with a "
                       f"user turn")


def with_visible_test(prompt: str, visible_test: str) -> str:
    """The prompt showing its ``visible_test``: added after the problem, in MBPP's words, unless the prompt already
    holds it (the built-in sets write it into their prompts, so their tasks and digests are unchanged)."""
    if not visible_test.strip() or visible_test.strip() in prompt:
        return prompt
    return f"{prompt.rstrip()}\nYour code should pass this test:\n{visible_test.strip()}"


def without_visible_test(prompt: str, visible_test: str) -> str:
    """The problem text of a prompt :func:`with_visible_test` made: its suffix taken off again (a prompt that does
    not end with it is returned whole)."""
    shown = with_visible_test("", visible_test)
    return prompt[:-len(shown)] if shown and prompt.endswith(shown) else prompt


def _tests(value: Any, where: str) -> str:
    """Python run after the program: a string, or a list of statements (MBPP's ``test_list``) joined by lines."""
    if isinstance(value, list) and value and all(isinstance(t, str) for t in value):
        value = "\n".join(value)
    if not isinstance(value, str) or not value.strip():
        raise DistlabError(f"{where}: 'tests' must be non-empty Python (asserts run after the program), as a string "
                           f"or a list of strings")
    return value


def answer_text(value: Any, where: str) -> str:
    """A math row's final answer as text; numbers are accepted because GSM8K-like exports often store them as numbers.

    Python's json reads the non-standard tokens ``NaN`` and ``Infinity`` as floats, whose text "nan" or "inf" no
    completion's number ever equals: such a row would train on a reward that is always 0, so it is refused, naming
    the line (a missing answer exported by pandas looks exactly like this)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise DistlabError(f"{where}: 'answer' is {json.dumps(value)}, not a number any completion can match (JSON has "
                           f"no NaN or Infinity); give the final answer, or remove the line")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise DistlabError(f"{where}: 'answer' must be a string or a number, got {type(value).__name__}")
    if not normalize(value):
        raise DistlabError(f"{where}: the final answer {value!r} is empty once normalised")
    return value


def _optional(row: Row, where: str) -> dict[str, str]:
    extra = {k: row[k] for k in OPTIONAL if row.get(k) is not None}
    for key, value in extra.items():
        if not isinstance(value, str):
            raise DistlabError(f"{where}: {key!r} must be a string, got {type(value).__name__}")
    return extra


def is_math_row(row: Row) -> bool:
    """A row checked by its final answer: it gives ``answer`` and no ``tests`` (a code row may carry an answer)."""
    return "answer" in row and "tests" not in row


def task_from_row(row: Any, where: str, default_id: str, source: str = "jsonl") -> Task:
    """The one way a task is made, from a row of a user's data or of a built-in set; errors name ``where``."""
    if not isinstance(row, dict):
        raise DistlabError(f"{where}: each line must be a JSON object with 'prompt' and 'tests', got "
                           f"{type(row).__name__}")
    math = is_math_row(row)
    missing = [k for k in ("prompt", "answer" if math else "tests") if k not in row]
    if missing:
        raise DistlabError(f"{where}: missing {', '.join(repr(k) for k in missing)} (each line needs {NEEDS})")
    extra = _optional(row, where)
    prompt = with_visible_test(_prompt(row["prompt"], where), extra.get("visible_test", ""))
    fields = dict(task_id=extra.get("task_id", default_id), prompt=prompt,
                  entry_point=extra.get("entry_point"), visible_test=extra.get("visible_test", ""),
                  source=extra.get("source", source), solution=extra.get("solution", ""))
    if math:
        return Task(**fields, tests="", kind="math", answer=answer_text(row["answer"], where))
    return Task(**fields, tests=_tests(row["tests"], where))


def row_tasks(rows: Iterable[Row], what: str) -> list[Task]:
    """Tasks of a built-in set's rows, which name their own ids (unique by construction, possibly none)."""
    return [task_from_row(row, f"{what} task {row.get('task_id')}", "") for row in rows]


def load_jsonl(path: str | Path) -> list[Task]:
    """Every task of the file, in order; a one-line error naming the file and line for anything malformed."""
    p = Path(path)
    if not p.is_file():
        raise DistlabError(f"task file {p} not found (task.train/task.eval name a .jsonl file of prompt and tests)")
    return unique_tasks(((task_from_row(row, where, f"{p.stem}/{n}"), where) for row, where, n in json_rows(p)),
                        f"task file {p}", "tasks")


def rows_text(rows: Iterable[Row]) -> str:
    """Rows as JSONL text, one row a line."""
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def write_jsonl(rows: Iterable[Row], path: str | Path) -> Path:
    """Rows as a file :func:`load_jsonl` reads back as the same tasks (a built-in set made editable); written
    atomically, so a reader never sees half a file."""
    from distlab.atomic import atomic_write_text

    p = Path(path)
    atomic_write_text(p, rows_text(rows))
    return p


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
