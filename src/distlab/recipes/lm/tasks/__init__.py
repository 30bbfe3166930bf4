"""Code-writing tasks for the LM recipes: MBPP, HumanEval and synthetic families, one :class:`Task` shape for all.

``load_tasks`` is the single entry point the recipes' configs map onto (``task.source``, ``task.split``, ...).
"""

from __future__ import annotations

import os

from distlab.errors import DistlabError, near_matches
from distlab.recipes.lm.tasks.extract import extract_code
from distlab.recipes.lm.tasks.humaneval import load_humaneval
from distlab.recipes.lm.tasks.jsonl import load_jsonl
from distlab.recipes.lm.tasks.math_jsonl import jsonl_layout, load_math_jsonl
from distlab.recipes.lm.tasks.math_synthetic import MATH_FAMILIES, MATH_FAMILIES_EVAL, MATH_FAMILIES_TRAIN, math_tasks
from distlab.recipes.lm.tasks.mbpp import DEFAULT_MBPP_DIR, load_mbpp
from distlab.recipes.lm.tasks.saved_dataset import is_dataset_dir, load_saved_dataset
from distlab.recipes.lm.tasks.prompts import (build_program, chat_messages, stop_strings, text_completion,
                                              text_prompt)
from distlab.recipes.lm.tasks.synthetic import FAMILIES, FAMILIES_EVAL, FAMILIES_TRAIN, synthetic_tasks
from distlab.recipes.lm.tasks.task import Task

SOURCES = ("mbpp", "humaneval", "synthetic", "math")

__all__ = ["DEFAULT_MBPP_DIR", "FAMILIES", "FAMILIES_EVAL", "FAMILIES_TRAIN", "SOURCES", "Task", "build_program",
           "chat_messages", "extract_code", "is_dataset_dir", "load_humaneval", "load_jsonl", "load_mbpp",
           "load_saved_dataset", "load_tasks", "MATH_FAMILIES", "MATH_FAMILIES_EVAL", "MATH_FAMILIES_TRAIN",
           "load_math_jsonl", "math_tasks", "stop_strings", "synthetic_tasks", "text_completion", "text_prompt"]


def load_tasks(source: str, split: str, *, mbpp_dir: str | os.PathLike[str] | None = None, n: int | None = None,
               seed: int = 0, families: str | list[str] | None = None, include_challenge: bool = False) -> list[Task]:
    """Tasks named the way configs name them.

    ``FILE.jsonl``: a user's own tasks (:mod:`.jsonl`), ``split`` unused. ``DIR``: a ``datasets`` directory saved
    with ``save_to_disk`` (:mod:`.saved_dataset`), ``split`` picks a DatasetDict's split. ``mbpp``: ``split`` is
    train/validation/test/prompt or sanitized-<split>. ``humaneval``: split ``test`` (it is
    an evaluation set only). ``synthetic``: split ``train`` or ``eval`` picks ``FAMILIES_TRAIN`` or the held-out
    ``FAMILIES_EVAL`` unless ``families`` is given, and ``n`` tasks are drawn from ``seed``. For the real
    benchmarks ``n`` keeps the first ``n`` tasks (quick runs). ``math`` (or ``math_synthetic``): synthetic word problems
    with a final answer, as ``synthetic`` with ``MATH_FAMILIES_TRAIN``/``MATH_FAMILIES_EVAL``. A ``.jsonl`` file of
    GSM8K (question/answer) or MATH (problem/solution) rows is read as math tasks (:mod:`.math_jsonl`).
    """
    if str(source).endswith(".jsonl"):  # a user's own tasks; the file is the split
        layout = jsonl_layout(source)
        tasks = load_jsonl(source) if layout == "code" else load_math_jsonl(source, layout)
    elif source not in SOURCES and is_dataset_dir(source):  # a user's datasets directory
        tasks = load_saved_dataset(source, split)
    elif source == "mbpp":
        tasks = load_mbpp(split, mbpp_dir, include_challenge=include_challenge)
    elif source == "humaneval":
        if split != "test":
            raise DistlabError(f"HumanEval has only a test split (it is for evaluation), got split={split!r}")
        tasks = load_humaneval()
    elif source == "synthetic":
        if split not in ("train", "eval"):
            raise DistlabError(f"synthetic split {split!r} is not one of train, eval")
        if n is None:
            raise DistlabError("synthetic tasks are generated: set the number of tasks (task.n)")
        return synthetic_tasks(n, seed=seed, families=families if families is not None else split)
    elif source in ("math", "math_synthetic"):
        if split not in ("train", "eval"):
            raise DistlabError(f"math split {split!r} is not one of train, eval")
        if n is None:
            raise DistlabError("math tasks are generated: set the number of tasks (task.n)")
        return math_tasks(n, seed=seed, families=families if families is not None else split)
    else:
        hint = near_matches(source, SOURCES)
        raise DistlabError(f"unknown task source {source!r}; choose one of {', '.join(SOURCES)} or a .jsonl file "
                           f"or a datasets directory"
                           + (f" (did you mean {hint[0]!r}?)" if hint else ""))
    return tasks if n is None else tasks[:n]
