"""Synthetic math word problems with a final answer: arithmetic stories, sums of lists, unit conversions, percents.

Like the code families (:mod:`.synthetic`), each family is one regular sentence pattern with random constants, so a
small policy gets reward variance; every answer is a whole number. ``MATH_FAMILIES_EVAL`` are siblings of training
families (sharing, mean, another unit, discounts, two-item totals) held out to measure generalisation. A task's
``solution`` is the worked line ``<expression> = <answer>. The answer is <answer>.``
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from distlab.recipes.lm.tasks.families import draw_rows, family_names
from distlab.recipes.lm.tasks.jsonl import Row, row_tasks
from distlab.recipes.lm.tasks.task import Task

NAMES = ("Ann", "Ben", "Cara", "Dev", "Eli", "Fay", "Gus", "Hana")
ITEMS = ("apples", "marbles", "stickers", "books", "coins", "shells")

Maker = Callable[[random.Random], tuple[str, str, int]]  # (question, worked expression, answer)


def _join(xs: Sequence[int]) -> str:
    return ", ".join(str(x) for x in xs[:-1]) + f" and {xs[-1]}"


def _add_sub_story(rng: random.Random):
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = rng.randint(5, 40), rng.randint(2, 30)
    c = rng.randint(1, a + b - 1)
    q = f"{name} has {a} {item}. {name} gets {b} more and then gives away {c}. How many {item} does {name} have now?"
    return q, f"{a} + {b} - {c}", a + b - c


def _list_sum(rng: random.Random):
    xs = [rng.randint(1, 30) for _ in range(rng.randint(3, 5))]
    return f"What is the sum of {_join(xs)}?", " + ".join(map(str, xs)), sum(xs)


def _groups(rng: random.Random):
    a, b, item = rng.randint(2, 12), rng.randint(2, 12), rng.choice(ITEMS)
    return f"There are {a} bags with {b} {item} in each bag. How many {item} are there in total?", f"{a} * {b}", a * b


def _minutes(rng: random.Random):
    h, m = rng.randint(1, 9), rng.randint(1, 59)
    return f"How many minutes are there in {h} hours and {m} minutes?", f"{h} * 60 + {m}", h * 60 + m


def _percent_of(rng: random.Random):
    p, n = rng.choice((10, 20, 25, 50, 75)), 20 * rng.randint(1, 20)
    return f"What is {p}% of {n}?", f"{p} / 100 * {n}", p * n // 100


def _share(rng: random.Random):
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    k, each = rng.randint(2, 9), rng.randint(2, 12)
    extra = rng.randint(1, k * each - 1)
    q = (f"{name} has {k * each - extra} {item} and finds {extra} more. {name} shares them equally among {k} "
         f"friends. How many {item} does each friend get?")
    return q, f"({k * each - extra} + {extra}) / {k}", each


def _list_mean(rng: random.Random):
    n, mean = rng.randint(3, 5), rng.randint(3, 20)
    xs = [rng.randint(1, 2 * mean) for _ in range(n - 1)]
    xs.append(n * mean - sum(xs))
    if xs[-1] < 0:
        xs = [mean] * n
    return f"What is the average of {_join(xs)}?", f"({' + '.join(map(str, xs))}) / {n}", mean


def _centimetres(rng: random.Random):
    m, c = rng.randint(1, 9), rng.randint(1, 99)
    return f"How many centimetres are there in {m} metres and {c} centimetres?", f"{m} * 100 + {c}", m * 100 + c


def _discount(rng: random.Random):
    p, n = rng.choice((10, 20, 25, 50)), 20 * rng.randint(1, 15)
    q = f"A jacket costs {n} dollars. It is on sale for {p}% off. What is the sale price in dollars?"
    return q, f"{n} - {p} / 100 * {n}", n - p * n // 100


def _two_items(rng: random.Random):
    a, b, c = rng.randint(2, 9), rng.randint(2, 15), rng.randint(1, 20)
    q = f"Pens cost {b} dollars each and a notebook costs {c} dollars. How much do {a} pens and one notebook cost?"
    return q, f"{a} * {b} + {c}", a * b + c


MATH_FAMILIES: dict[str, Maker] = {
    "add_sub_story": _add_sub_story, "list_sum": _list_sum, "groups": _groups, "minutes": _minutes,
    "percent_of": _percent_of,
    "share_equally": _share, "list_mean": _list_mean, "centimetres": _centimetres, "discount": _discount,
    "two_items": _two_items,
}
MATH_FAMILIES_TRAIN: tuple[str, ...] = ("add_sub_story", "list_sum", "groups", "minutes", "percent_of")
MATH_FAMILIES_EVAL: tuple[str, ...] = ("share_equally", "list_mean", "centimetres", "discount", "two_items")


def resolve_math_families(families: Sequence[str] | str) -> list[str]:
    """``"train"``, ``"eval"``, ``"all"`` or explicit names (a typo names the nearest family)."""
    return family_names(families, MATH_FAMILIES, MATH_FAMILIES_TRAIN, MATH_FAMILIES_EVAL, "math")


def make_math_row(family: str, rng: random.Random, *, task_id: str) -> Row:
    """A math row (an ``answer``, no ``tests``) of the task schema, drawn from ``rng``."""
    question, expr, answer = MATH_FAMILIES[resolve_math_families([family])[0]](rng)
    return {"task_id": task_id, "prompt": question, "answer": str(answer), "source": f"math:{family}",
            "solution": f"{expr} = {answer}. The answer is {answer}."}


def math_rows(n: int, *, seed: int = 0, families: Sequence[str] | str = "train") -> list[Row]:
    """``n`` rows cycling through ``families``; row ``i`` depends only on (seed, family, i), not on ``n``."""
    return draw_rows(n, seed, resolve_math_families(families), "math",
                     lambda fam, rng, task_id: make_math_row(fam, rng, task_id=task_id))


def math_tasks(n: int, *, seed: int = 0, families: Sequence[str] | str = "train") -> list[Task]:
    """Built by the one row path (:mod:`.jsonl`), so the set written as JSONL loads back as these tasks."""
    return row_tasks(math_rows(n, seed=seed, families=families), "math")
