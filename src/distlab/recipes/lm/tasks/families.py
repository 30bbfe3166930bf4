"""Generated task families, code or math: names resolved one way, and rows of the task schema (:mod:`.jsonl`) drawn
so that row ``i`` depends only on (seed, family, i), never on how many are drawn (a larger set extends a smaller
one)."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

from distlab.errors import DistlabError, near_matches
from distlab.recipes.lm.tasks.jsonl import Row


def family_names(families: Sequence[str] | str, known: Mapping, train: Sequence[str], held_out: Sequence[str],
                 kind: str) -> list[str]:
    """``"train"``, ``"eval"``, ``"all"``, a comma-separated string or a list of names; a typo names the nearest."""
    if isinstance(families, str):
        named = {"train": tuple(train), "eval": tuple(held_out), "all": tuple(known)}
        families = named.get(families) or [f.strip() for f in families.split(",") if f.strip()]
    for name in families:
        if name not in known:
            hint = near_matches(name, known)
            raise DistlabError(f"unknown {kind} task family {name!r}; choose from {', '.join(known)} or "
                               "train/eval/all" + (f" (did you mean {hint[0]!r}?)" if hint else ""))
    if not families:
        raise DistlabError(f"no {kind} task family given; use train, eval, all or family names")
    return list(families)


def draw_rows(n: int, seed: int, names: Sequence[str], kind: str,
              make: Callable[[str, random.Random, str], Row]) -> list[Row]:
    """``n`` rows cycling through ``names``; ``make(family, rng, task_id)`` draws one from its own stream."""
    if n < 0:
        raise DistlabError(f"number of {kind} tasks must be >= 0, got {n}")
    rows = []
    for i in range(n):
        fam = names[i % len(names)]
        rng = random.Random(f"distlab-{kind}/{seed}/{fam}/{i}")  # str seeds are stable across runs
        rows.append(make(fam, rng, f"{kind}/{fam}/{seed}/{i}"))
    return rows
