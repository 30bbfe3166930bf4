"""Tasks for the LM recipes: MBPP, HumanEval, code and math families and a user's own files, one :class:`Task` shape
for all, built by one path from rows of one schema (:mod:`.jsonl`).

``load_tasks`` is the single entry point the recipes' configs map onto (``task.source``, ``task.split``, ...);
``builtin_rows`` gives a built-in set's rows, which ``write_jsonl`` turns into a file a user can edit and train on.
"""

from __future__ import annotations

import os

from distlab.recipes.lm.tasks.builtin import SOURCES, builtin_rows
from distlab.recipes.lm.tasks.extract import extract_code
from distlab.recipes.lm.tasks.humaneval import load_humaneval
from distlab.recipes.lm.tasks.jsonl import load_jsonl, row_tasks, task_from_row, write_jsonl
from distlab.recipes.lm.tasks.math_jsonl import SCHEMA, jsonl_layout, load_math_jsonl
from distlab.recipes.lm.tasks.math_synthetic import MATH_FAMILIES, MATH_FAMILIES_EVAL, MATH_FAMILIES_TRAIN, math_tasks
from distlab.recipes.lm.tasks.mbpp import DEFAULT_MBPP_DIR, load_mbpp
from distlab.recipes.lm.tasks.prompts import (build_program, chat_messages, stop_strings, text_completion,
                                              text_prompt)
from distlab.recipes.lm.tasks.saved_dataset import is_dataset_dir, load_saved_dataset
from distlab.recipes.lm.tasks.synthetic import FAMILIES, FAMILIES_EVAL, FAMILIES_TRAIN, synthetic_tasks
from distlab.recipes.lm.tasks.task import Task

__all__ = ["DEFAULT_MBPP_DIR", "FAMILIES", "FAMILIES_EVAL", "FAMILIES_TRAIN", "SOURCES", "Task", "build_program",
           "builtin_rows", "chat_messages", "extract_code", "is_dataset_dir", "load_humaneval", "load_jsonl",
           "load_mbpp", "load_saved_dataset", "load_tasks", "MATH_FAMILIES", "MATH_FAMILIES_EVAL",
           "MATH_FAMILIES_TRAIN", "load_math_jsonl", "math_tasks", "stop_strings", "synthetic_tasks",
           "task_from_row", "text_completion", "text_prompt", "write_jsonl"]


def load_tasks(source: str, split: str, *, mbpp_dir: str | os.PathLike[str] | None = None, n: int | None = None,
               seed: int = 0, families: str | list[str] | None = None, include_challenge: bool = False) -> list[Task]:
    """Tasks named the way configs name them.

    ``FILE.jsonl``: a user's own tasks (:mod:`.jsonl`, code or math rows; a built-in set written with
    ``write_jsonl(builtin_rows(...), FILE)`` is one), ``split`` unused. ``DIR``: a ``datasets`` directory saved
    with ``save_to_disk`` (:mod:`.saved_dataset`), ``split`` picks a DatasetDict's split. ``mbpp``: ``split`` is
    train/validation/test/prompt, sanitized-<split>, or sanitized (every hand-verified task, 427). ``humaneval``:
    split ``test`` (it is an evaluation set only). ``synthetic``: split ``train`` or ``eval`` picks
    ``FAMILIES_TRAIN`` or the held-out ``FAMILIES_EVAL`` unless ``families`` is given, and ``n`` tasks are drawn
    from ``seed``. For the real benchmarks ``n`` keeps the first ``n`` tasks (quick runs). ``math`` (or
    ``math_synthetic``): synthetic word problems with a final answer, as ``synthetic`` with
    ``MATH_FAMILIES_TRAIN``/``MATH_FAMILIES_EVAL``. A ``.jsonl`` file of GSM8K (question/answer) or MATH
    (problem/solution) rows is read as math tasks (:mod:`.math_jsonl`).
    """
    if str(source).endswith(".jsonl"):  # a user's own tasks; the file is the split
        layout = jsonl_layout(source)
        tasks = load_jsonl(source) if layout == SCHEMA else load_math_jsonl(source, layout)
    elif source not in SOURCES and is_dataset_dir(source):  # a user's datasets directory
        tasks = load_saved_dataset(source, split)
    else:  # a built-in set: its rows already hold n
        return row_tasks(builtin_rows(source, split, mbpp_dir=mbpp_dir, n=n, seed=seed, families=families,
                                      include_challenge=include_challenge), str(source))
    return tasks if n is None else tasks[:n]
