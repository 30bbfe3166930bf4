"""How the EvalPlus-style harness judges a program: EvalPlus's float tolerance and its time limit per problem
(evalplus 0.3.1: ``eval/__init__.py``, ``config.py``).

Tolerance. EvalPlus calls the function and compares its output with the reference output by ``==``; when that
fails and the expected value is a float (or a list or tuple of floats), or the task has its own tolerance, it
accepts the same type within ``|out - exp| <= atol + 1e-7 |exp|`` (atol 1e-6, or the task's). The ``distlab``
harness runs the asserts as written, so ``math.pi * r * r`` fails ``== 3.141592653589793 * r ** 2`` by one ulp.
Here each ``assert X == <numeric literal>`` becomes a call of a helper that does EvalPlus's comparison. It runs in
the sandbox's judge like any test: the program's values still reach it only as exact built-in types, so a value of
another type (a numpy scalar, a namedtuple, a Decimal) still fails, which EvalPlus would compare with ``==``.

Time. EvalPlus gives each test input ``max(1 s, 4 x the reference solution's time)`` and the problem at most 60 s
of those, plus 2 s for its process. The sandbox runs a program against all its asserts at once, so the problem
gets ``min(60, asserts x 1 s + 4 x reference time) + 2`` s, the reference time measured once per process by running
the task's own solution in the sandbox (start-up included, so slightly more generous); a task without a solution
that passes gets the 1 s per assert alone. The ``distlab`` harness gives every program ``sandbox.timeout_s`` (5 s).
"""

from __future__ import annotations

import ast
import functools
import threading
import warnings

from distlab.recipes.lm.tasks.task import Task
from distlab.sandbox import Sandbox

MIN_LIMIT_S = 1.0  # per test input (DEFAULT_MIN_TIME_LIMIT)
LIMIT_FACTOR = 4.0  # x the reference's time (DEFAULT_GT_TIME_LIMIT_FACTOR)
TASK_CAP_S = 60.0  # a problem's budget at most (EVALPLUS_TIMEOUT_PER_TASK's default)
SLACK_S = 2.0  # EvalPlus adds 1 s to the budget and waits 1 s more for its process
FLOAT_ATOL = 1e-6
RTOL = 1e-7
# MBPP tasks whose outputs EvalPlus compares within 1e-4 (get_atol in the sdist's tools/mbpp/init_plus.py)
MBPP_LOOSE_IDS = frozenset({82, 85, 98, 120, 124, 137, 139, 163, 233, 246, 248, 276, 293, 300, 312, 442, 574, 742,
                            746})
MBPP_LOOSE_ATOL = 1e-4
HELPER = "__evalplus_close__"
# Runs in the judge with the tests: every comparison in it goes through the sandbox's trusted checks
HELPER_SOURCE = f'''def {HELPER}(out, exp, atol):
    if out == exp:
        return True
    if type(out) is not type(exp):
        return False
    if type(exp) in (list, tuple):
        if len(out) != len(exp):
            return False
        pairs = list(zip(out, exp))
    else:
        pairs = [(out, exp)]
    for o, e in pairs:
        if type(o) not in (int, float) or type(e) not in (int, float):
            return False
        if not abs(o - e) <= atol + {RTOL!r} * abs(e):
            return False
    return True
'''
_NOT_LITERAL = object()


def task_atol(task: Task) -> float:
    """EvalPlus's tolerance of its own for this task (0 = only floats are compared within 1e-6)."""
    kind, _, number = task.task_id.rpartition("/")
    if kind.startswith("mbpp") and number.isdigit() and int(number) in MBPP_LOOSE_IDS:
        return MBPP_LOOSE_ATOL
    return 0.0


def _literal(node: ast.expr) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


def _is_number(x: object) -> bool:
    return type(x) in (int, float)


def _tolerance(expected: object, atol: float) -> float:
    """The tolerance EvalPlus would compare ``expected`` with: 0 when it compares exactly."""
    items = list(expected) if type(expected) in (list, tuple) else [expected]
    if not items or not all(_is_number(x) for x in items):
        return 0.0
    if atol:
        return atol
    return FLOAT_ATOL if all(type(x) is float for x in items) else 0.0


def _tolerant(node: ast.Assert, atol: float) -> bool:
    """Turn ``assert X == literal`` (either side) into the helper's call, in place; True when it did."""
    test = node.test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    left, right = test.left, test.comparators[0]
    for out, exp in ((left, right), (right, left)):
        value = _literal(exp)
        if value is _NOT_LITERAL or _literal(out) is not _NOT_LITERAL:
            continue
        tol = _tolerance(value, atol)
        if tol:
            node.test = ast.Call(ast.Name(HELPER, ast.Load()), [out, exp, ast.Constant(tol)], [])
            return True
        return False
    return False


@functools.lru_cache(maxsize=4096)
def tolerant_tests(tests: str, atol: float = 0.0) -> str:
    """``tests`` with each numeric ``==`` assert compared as EvalPlus compares outputs; unchanged when none is.
    Cached: every completion of a problem is judged against the same rewrite."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(tests)
    except (SyntaxError, ValueError):
        return tests  # the sandbox names the problem
    changed = [_tolerant(n, atol) for n in ast.walk(tree) if isinstance(n, ast.Assert)]
    if not any(changed):
        return tests
    return f"{HELPER_SOURCE}\n{ast.unparse(ast.fix_missing_locations(tree))}\n"


def count_asserts(tests: str) -> int:
    """Test inputs, as EvalPlus counts them for the time budget: the asserts, at least one."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return max(1, sum(isinstance(n, ast.Assert) for n in ast.walk(ast.parse(tests))))
    except (SyntaxError, ValueError):
        return 1


def time_limit(n_asserts: int, reference_s: float | None) -> float:
    """A problem's wall-clock budget (module docstring)."""
    return min(TASK_CAP_S, n_asserts * MIN_LIMIT_S + LIMIT_FACTOR * (reference_s or 0.0)) + SLACK_S


class ReferenceTimes:
    """Seconds each task's own solution takes in the sandbox, measured once per process and kept, so that the base
    model's and the trained model's evaluations give a problem the same budget."""

    def __init__(self) -> None:
        self._seconds: dict[tuple[str, str], float | None] = {}
        self._lock = threading.Lock()

    def measure(self, tasks: list[Task], sandbox: Sandbox) -> None:
        """Runs the solutions not measured yet, ``sandbox.config.workers`` at once."""
        with self._lock:
            todo = list({(t.solution, tolerant_tests(t.tests, task_atol(t))) for t in tasks if t.solution}
                        - set(self._seconds))
        results = sandbox.run_many([(program, tests, TASK_CAP_S) for program, tests in todo]) if todo else []
        with self._lock:
            for key, result in zip(todo, results):
                self._seconds[key] = result.seconds if result.passed else None
        # a solution that fails its own tests gives no time: its task gets the per-assert floor

    def seconds(self, task: Task) -> float | None:
        with self._lock:
            return self._seconds.get((task.solution, tolerant_tests(task.tests, task_atol(task))))
