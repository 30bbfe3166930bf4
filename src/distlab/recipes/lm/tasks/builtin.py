"""The built-in task sets by the names configs use, as rows of the task schema (:mod:`.jsonl`).

Each set is an adapter that yields rows; :func:`~distlab.recipes.lm.tasks.load_tasks` builds its tasks from them by
the same path as a user's file, and the same rows written with :func:`~.jsonl.write_jsonl` are a file the user can
edit and train on (``task.train=FILE.jsonl``).
"""

from __future__ import annotations

import os

from distlab.errors import DistlabError, near_matches
from distlab.recipes.lm.tasks.humaneval import humaneval_rows
from distlab.recipes.lm.tasks.jsonl import Row
from distlab.recipes.lm.tasks.math_synthetic import math_rows
from distlab.recipes.lm.tasks.mbpp import mbpp_rows
from distlab.recipes.lm.tasks.mbpp_docstring import STYLES, docstring_row
from distlab.recipes.lm.tasks.synthetic import synthetic_rows

SOURCES = ("mbpp", "mbpp:docstring", "humaneval", "synthetic", "math")
MATH_ALIASES = ("math", "math_synthetic")


def _drawn_split(kind: str, split: str, n: int | None) -> int:
    """Drawn sets have no files to count: the split picks the families, and the number must be given."""
    if split not in ("train", "eval"):
        raise DistlabError(f"{kind} split {split!r} is not one of train, eval")
    if n is None:
        raise DistlabError(f"{kind} tasks are generated: set the number of tasks (task.n)")
    return n


def builtin_rows(source: str, split: str, *, mbpp_dir: str | os.PathLike[str] | None = None, n: int | None = None,
                 seed: int = 0, families: str | list[str] | None = None,
                 include_challenge: bool = False) -> list[Row]:
    """The rows of a built-in set, with the arguments and errors of ``load_tasks`` (which documents them)."""
    if source == "mbpp":
        rows = mbpp_rows(split, mbpp_dir, include_challenge=include_challenge)
    elif source.startswith("mbpp:"):
        style = source.removeprefix("mbpp:")
        if style not in STYLES:
            raise DistlabError(f"unknown MBPP prompt style {style!r} in {source!r}; choose one of "
                               f"{', '.join('mbpp:' + s for s in STYLES)}, or plain mbpp")
        rendered = (docstring_row(r) for r in mbpp_rows(split, mbpp_dir, include_challenge=include_challenge))
        rows = [r for r in rendered if r is not None]
    elif source == "humaneval":
        if split != "test":
            raise DistlabError(f"HumanEval has only a test split (it is for evaluation), got split={split!r}")
        rows = humaneval_rows()
    elif source == "synthetic":
        count = _drawn_split("synthetic", split, n)
        return synthetic_rows(count, seed=seed, families=families if families is not None else split)
    elif source in MATH_ALIASES:
        count = _drawn_split("math", split, n)
        return math_rows(count, seed=seed, families=families if families is not None else split)
    else:
        hint = near_matches(source, SOURCES)
        raise DistlabError(f"unknown task source {source!r}; choose one of {', '.join(SOURCES)} or a .jsonl file "
                           f"or a datasets directory"
                           + (f" (did you mean {hint[0]!r}?)" if hint else ""))
    return rows if n is None else rows[:n]
