"""Synthetic function-writing tasks: a learnable signal for tiny models and CPU tests.

Real benchmarks give a small or untrained policy almost no reward variance, so GRPO has nothing to learn from.
These families are easy, parametrised by random constants, and phrased in one regular sentence. Each prompt shows one
example assert; the hidden tests use other inputs, chosen so that the input itself, a constant (the visible answer)
or, for lists, the first element, the last element or the length, all fail: fitting the shown example earns nothing.
``FAMILIES_EVAL`` are siblings of training families (min of max, lower of upper, affine of add and multiply) held
out to measure generalisation beyond the functions trained on.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from distlab.errors import DistlabError
from distlab.recipes.lm.tasks.families import draw_rows, family_names
from distlab.recipes.lm.tasks.jsonl import Row, row_tasks
from distlab.recipes.lm.tasks.task import Task

LETTERS = "abcdefgh"


def _int(lo: int, hi: int) -> Callable[[random.Random], int]:
    return lambda rng: rng.randint(lo, hi)


def _word(rng: random.Random, alphabet: str = LETTERS, lo: int = 2, hi: int = 6) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))


def _mixed_word(rng: random.Random) -> str:
    return "".join(c.upper() if rng.random() < 0.5 else c for c in _word(rng))


def _int_list(rng: random.Random) -> list[int]:
    return [rng.randint(0, 9) for _ in range(rng.randint(2, 5))]


@dataclass(frozen=True)
class Family:
    """One kind of function. ``make`` draws the constants and returns (description, return expression, input maker)."""

    name: str
    arg: str
    make: Callable[[random.Random], tuple[str, str, Callable[[random.Random], Any]]]


def _add(rng: random.Random):
    k = rng.randint(1, 9)
    return f"returns x plus {k}", f"x + {k}", _int(0, 20)


def _sub(rng: random.Random):
    k = rng.randint(1, 9)
    return f"returns x minus {k}", f"x - {k}", _int(0, 20)


def _mul(rng: random.Random):
    k = rng.randint(2, 9)
    return f"returns x times {k}", f"x * {k}", _int(0, 12)


def _mod(rng: random.Random):
    k = rng.randint(2, 9)
    return f"returns the remainder of x divided by {k}", f"x % {k}", _int(0, 50)


def _greater(rng: random.Random):
    k = rng.randint(0, 20)
    return f"returns True if x is greater than {k}, else False", f"x > {k}", _int(k - 5, k + 5)


def _less(rng: random.Random):
    k = rng.randint(0, 20)
    return f"returns True if x is less than {k}, else False", f"x < {k}", _int(k - 5, k + 5)


def _affine(rng: random.Random):
    a, b = rng.randint(2, 9), rng.randint(1, 9)
    return f"returns {a} times x plus {b}", f"{a} * x + {b}", _int(0, 12)


def _poly(rng: random.Random):
    k = rng.randint(1, 9)
    return f"returns x squared plus {k}", f"x * x + {k}", _int(0, 12)


def _reverse(rng: random.Random):
    return "returns the string s reversed", "s[::-1]", _word


def _upper(rng: random.Random):
    return "returns the string s in upper case", "s.upper()", _word


def _lower(rng: random.Random):
    return "returns the string s in lower case", "s.lower()", _mixed_word


def _repeat(rng: random.Random):
    k = rng.randint(2, 4)
    return f"returns the string s repeated {k} times", f"s * {k}", lambda r: _word(r, lo=1, hi=4)


def _count_char(rng: random.Random):
    c = rng.choice(LETTERS[:4])
    return f"returns how many times the letter '{c}' appears in s", f"s.count({c!r})", \
        lambda r: _word(r, LETTERS[:4], 2, 8)


def _count_list(rng: random.Random):
    k = rng.randint(0, 3)
    return f"returns how many times {k} appears in the list xs", f"xs.count({k})", \
        lambda r: [r.randint(0, 3) for _ in range(r.randint(2, 6))]


def _max(rng: random.Random):
    return "returns the largest number in the list xs", "max(xs)", _int_list


def _min(rng: random.Random):
    return "returns the smallest number in the list xs", "min(xs)", _int_list


def _sum(rng: random.Random):
    return "returns the sum of the numbers in the list xs", "sum(xs)", _int_list


FAMILIES: dict[str, Family] = {f.name: f for f in [
    Family("add_const", "x", _add),
    Family("sub_const", "x", _sub),
    Family("mul_const", "x", _mul),
    Family("mod_const", "x", _mod),
    Family("greater_than", "x", _greater),
    Family("reverse_str", "s", _reverse),
    Family("upper_str", "s", _upper),
    Family("repeat_str", "s", _repeat),
    Family("count_char", "s", _count_char),
    Family("max_of_list", "xs", _max),
    Family("sum_of_list", "xs", _sum),
    Family("affine", "x", _affine),
    Family("poly", "x", _poly),
    Family("less_than", "x", _less),
    Family("lower_str", "s", _lower),
    Family("min_of_list", "xs", _min),
    Family("count_list", "xs", _count_list),
]}
FAMILIES_TRAIN: tuple[str, ...] = ("add_const", "sub_const", "mul_const", "mod_const", "greater_than", "reverse_str",
                                   "upper_str", "repeat_str", "count_char", "max_of_list", "sum_of_list")
FAMILIES_EVAL: tuple[str, ...] = ("affine", "poly", "less_than", "lower_str", "min_of_list", "count_list")

# Programs a policy could "write" without solving the task; each must fail at least one hidden test.
_DECOYS: dict[str, tuple[Callable[[Any], Any], ...]] = {
    "x": (lambda x: x,),
    "s": (lambda s: s,),
    "xs": (lambda xs: xs, lambda xs: xs[0], lambda xs: xs[-1], len),
}


def _fails_somewhere(decoy: Callable[[Any], Any], cases: list[tuple[Any, Any]]) -> bool:
    for inp, out in cases:
        try:
            got = decoy(list(inp) if isinstance(inp, list) else inp)
        except Exception:
            return True
        if type(got) is not type(out) or got != out:
            return True
    return False


def _assert(arg_value: Any, expected: Any) -> str:
    return f"assert f({arg_value!r}) == {expected!r}"


def make_row(family: str, rng: random.Random, *, task_id: str, n_hidden: int = 4) -> Row:
    """One task of ``family``, as a row of the task schema, with constants and inputs drawn from ``rng``."""
    fam = resolve_families([family])[0]
    if n_hidden < 2:
        raise DistlabError(f"n_hidden={n_hidden}: synthetic tasks need at least 2 hidden tests so that a constant "
                           "answer can fail them")
    desc, expr, draw = fam.make(rng)
    solution = f"def f({fam.arg}):\n    return {expr}\n"
    namespace: dict[str, Any] = {}
    exec(solution, namespace)  # our own two-line program, not model output
    fn = namespace["f"]
    visible_in = draw(rng)
    visible_out = fn(visible_in)
    for _ in range(1000):
        inputs: list[Any] = []
        while len(inputs) < n_hidden:
            x = draw(rng)
            if x != visible_in and x not in inputs:
                inputs.append(x)
        cases = [(x, fn(x)) for x in inputs]
        outs = [o for _, o in cases]
        if (len({repr(o) for o in outs}) >= 2
                and all(_fails_somewhere(d, cases) for d in _DECOYS[fam.arg])):
            break
    else:  # pragma: no cover - the input ranges make this practically impossible
        raise RuntimeError(f"could not draw discriminating hidden tests for {family}")
    visible = _assert(visible_in, visible_out)
    prompt = f"Write a function f({fam.arg}) that {desc}.\nExample: {visible}"
    tests = "\n".join([visible] + [_assert(x, o) for x, o in cases]) + "\n"
    return {"task_id": task_id, "prompt": prompt, "entry_point": "f", "tests": tests, "visible_test": visible,
            "source": f"synthetic:{family}", "solution": solution}


def resolve_families(families: Sequence[str] | str) -> list[Family]:
    """Accept ``"train"``, ``"eval"``, ``"all"`` or explicit names, and name the nearest family on a typo."""
    return [FAMILIES[n] for n in family_names(families, FAMILIES, FAMILIES_TRAIN, FAMILIES_EVAL, "synthetic")]


def synthetic_rows(n: int, *, seed: int = 0, families: Sequence[str] | str = "train",
                   n_hidden: int = 4) -> list[Row]:
    """``n`` rows cycling through ``families``; row ``i`` depends only on (seed, family, i), not on ``n``.

    Train and evaluate in-distribution with different seeds; measure generalisation with ``families="eval"``.
    Small constant ranges mean two seeds can produce the same function with different examples.
    """
    names = [f.name for f in resolve_families(families)]
    return draw_rows(n, seed, names, "synthetic",
                     lambda fam, rng, task_id: make_row(fam, rng, task_id=task_id, n_hidden=n_hidden))


def synthetic_tasks(n: int, *, seed: int = 0, families: Sequence[str] | str = "train",
                    n_hidden: int = 4) -> list[Task]:
    """Built by the one row path (:mod:`.jsonl`), so the set written as JSONL loads back as these tasks."""
    return row_tasks(synthetic_rows(n, seed=seed, families=families, n_hidden=n_hidden), "synthetic")
