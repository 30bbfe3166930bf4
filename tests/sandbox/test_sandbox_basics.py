"""Verdicts on honest programs, configuration, isolation detection: real processes throughout."""

import os

import pytest
from omegaconf import OmegaConf
from sandbox_helpers import isolation_log

from distlab.errors import DistlabError
from distlab.sandbox import Sandbox, SandboxConfig, SandboxResult
from distlab.sandbox.runner import rewrite_tests

ADD = "def add(a, b):\n    return a + b\n"


def test_correct_passes_wrong_fails_syntax_errors(box):
    ok, wrong, syntax, raises, bad_tests = box.run_many([
        (ADD, "assert add(1, 2) == 3\nassert add(-1, 1) == 0\n"),
        (ADD.replace("+", "-"), "assert add(1, 2) == 3\n"),
        ("def add(a, b)\n    return a + b\n", "assert add(1, 2) == 3\n"),
        ("raise ValueError('boom')\n", "assert True\n"),
        (ADD, "assert add(1, 2) ==\n"),
    ])
    assert isinstance(ok, SandboxResult) and ok.passed and ok.status == "passed" and ok.returncode == 0
    assert 0 < ok.seconds < 1.0
    assert not wrong.passed and wrong.status == "failed" and "AssertionError" in wrong.stderr_tail
    assert 'tests.py", line 1' in wrong.stderr_tail  # rewritten asserts keep their line numbers
    assert not syntax.passed and syntax.status == "error" and "SyntaxError" in syntax.stderr_tail
    assert not raises.passed and raises.status == "error" and "ValueError: boom" in raises.stderr_tail
    assert not bad_tests.passed and bad_tests.status == "bad_tests"  # the tests' fault, not the program's


def test_output_is_captured_and_token_hidden(box):
    r = box.run("print('hello from the program')\n", "print('and from the tests')\nassert True\n")
    assert r.passed
    assert r.stdout_tail.split() == ["hello", "from", "the", "program", "and", "from", "the", "tests"]


def test_honest_tests_of_many_shapes_pass(box):
    program = ADD + "def pairs(n):\n    return {i: [i, (i, str(i))] for i in range(n)}\n"
    tests = """
import math
def check(candidate):
    assert candidate(2, 3) == 5, "message"
    assert candidate(0.1, 0.2) != 0.3
    assert abs(candidate(0.1, 0.2) - 0.3) < 1e-9
    assert math.isclose(candidate(1.5, 1.5), 3.0)
    assert 1 < candidate(1, 1) <= 2
    assert candidate(1, 1) in {2, 3} and candidate(1, 1) not in [4]
    assert not candidate(1, 1) == 3
    assert candidate("a", "b")
    assert candidate([1], [2]) == [1, 2] and candidate((1,), (2,)) == (1, 2)
    assert pairs(3)[2] == [2, (2, "2")] and pairs(0) == {}
    assert type(candidate(1, 2)) is int and type(candidate(1, 2)) == int
    assert candidate(1, 2) is not None
    assert all(candidate(i, i) == 2 * i for i in range(5))
    results = [candidate(i, 1) for i in range(3)]
    if results != [1, 2, 3]:
        raise AssertionError(results)
    class Box:
        def __eq__(self, other):
            return self is other
    b = Box()
    assert b is b
check(add)
"""
    assert box.run(program, tests).status == "passed"


def test_stats_count_runs_and_statuses():
    with Sandbox(timeout_s=1, workers=1) as b:
        b.run_many([(ADD, "assert add(1, 1) == 2"), (ADD, "assert add(1, 1) == 3"), ("import os; os._exit(0)", "assert True")])
        assert b.stats["runs"] == 3 and b.stats["passed"] == 1 and b.stats["failed"] == 2
        assert b.stats["suspected_hacks"] == 1


def test_config_nests_in_omegaconf_and_checks_ranges():
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SandboxConfig), {"timeout_s": 2.5}))
    assert isinstance(cfg, SandboxConfig) and cfg.timeout_s == 2.5 and cfg.memory_mb == 1024
    assert cfg.workers == 0  # the node's cores shared by its ranks: test_sandbox_workers_per_node
    assert cfg.isolation == "auto"
    for bad, words in ((dict(timeout_s=0), "sandbox.timeout_s=0 must be between"),
                       (dict(timeout_s=float("inf")), "sandbox.timeout_s=inf"),
                       (dict(memory_mb=1), "sandbox.memory_mb=1 must be 32 or more"),
                       (dict(python="/nope/python"), "sandbox.python=/nope/python is not an executable")):
        with pytest.raises(DistlabError, match=words):
            Sandbox(SandboxConfig(**bad))


def test_isolation_detected_once_and_logged():
    def two_boxes():
        with Sandbox(workers=1) as b:
            level = b.isolation.level
        with Sandbox(workers=1):
            pass
        return level

    level, logged = isolation_log(two_boxes)
    assert len(logged) == 1 and level in logged[0][1]
    assert logged[0][0] == ("WARNING" if level == "rlimits" else "INFO")


@pytest.mark.parametrize("level", ["userns", "bogus"])
def test_unavailable_or_unknown_level_is_an_error(level):
    if level == "userns" and os.geteuid() != 0:
        level = "namespaces"  # the level a non-root user cannot have
    with pytest.raises(DistlabError, match=f"sandbox.isolation={level}"):
        Sandbox(isolation=level)


def test_every_comparison_in_the_tests_is_routed_through_the_check():
    calls = []

    def cmp(left, ops, rights):
        calls.append((left, ops, rights))
        return True

    def truth(value):
        calls.append(("truth", value))
        return True

    exec(rewrite_tests("x = [i for i in range(3) if i > 0]\nassert x\nassert 0 <= len(x) < 9\n"),
         {"__sbx_cmp__": cmp, "__sbx_truth__": truth})
    assert calls == [(0, (">",), (0,)), (1, (">",), (0,)), (2, (">",), (0,)), ("truth", [0, 1, 2]),
                     (0, ("<=", "<"), (3, 9))]


# The program runs in a process of its own (the host) and the tests in the judge's: what crosses over must behave
# as if both shared one interpreter, for everything an honest program and its tests do.
HONEST_SHAPES = {
    "callbacks": ("def apply(f, xs):\n    return [f(x) for x in xs]\ndef inc(x):\n    return x + 1\n"
                  "def twice(f, x):\n    return f(f(x))\ndef sort_by(xs, key):\n    return sorted(xs, key=key)\n"
                  "def call_kw(f, **kw):\n    return f(**kw)\n",
                  "assert apply(lambda v: v * 2, [1, 2]) == [2, 4]\n"
                  "assert twice(lambda v: inc(v), 1) == 3  # tests -> program -> tests -> program\n"
                  "assert sort_by(['bb', 'a', 'ccc'], key=len) == ['a', 'bb', 'ccc']\n"
                  "assert sort_by([3, 1, 2], key=lambda v: -v) == [3, 2, 1]\n"
                  "def named(a, b=0):\n    return a - b\n"
                  "assert call_kw(named, a=5, b=2) == 3\n"
                  "seen = []\napply(seen.append, [1, 2])\nassert seen == [1, 2]\n"
                  "try:\n    apply(lambda v: 1 / v, [0])\nexcept ZeroDivisionError:\n    pass\nelse:\n"
                  "    raise AssertionError('no ZeroDivisionError')\n"),
    "mutation": ("def sort_it(xs):\n    xs.sort()\ndef add_key(d, k):\n    d[k] = len(d)\ndef grow(s):\n    s.add(9)\n"
                 "def deep(m):\n    m[0].append(5)\n    m[1]['x'] = 1\ndef kw(*, into):\n    into.extend([1, 2])\n"
                 "def keep(xs):\n    return sum(xs)\n",
                 "xs = [3, 1, 2]\nsort_it(xs)\nassert xs == [1, 2, 3]\n"
                 "d = {'a': 0}\nadd_key(d, 'b')\nassert d == {'a': 0, 'b': 1}\n"
                 "s = {1}\ngrow(s)\nassert s == {1, 9}\n"
                 "inner = []\nm = [inner, {}]\ndeep(m)\nassert m == [[5], {'x': 1}] and m[0] is inner\n"
                 "out = []\nkw(into=out)\nassert out == [1, 2]\n"
                 "ys = [1, 2]\nassert keep(ys) == 3 and ys == [1, 2]\n"),
    "generators": ("def gen(n):\n    for i in range(n):\n        yield i\ndef naturals():\n    i = 0\n"
                   "    while True:\n        yield i\n        i += 1\ndef pairs(xs):\n    return zip(xs, xs[1:])\n"
                   "def squares(n):\n    return map(lambda v: v * v, range(n))\n",
                   "import itertools\nassert list(gen(3)) == [0, 1, 2] and sum(gen(4)) == 6\n"
                   "g = gen(2)\nassert next(g) == 0 and next(g) == 1\ntry:\n    next(g)\nexcept StopIteration:\n"
                   "    pass\nelse:\n    raise AssertionError\n"
                   "assert list(itertools.islice(naturals(), 4)) == [0, 1, 2, 3]\n"
                   "assert [a + b for a, b in pairs([1, 2, 3])] == [3, 5]\nassert list(squares(3)) == [0, 1, 4]\n"
                   "total = 0\nfor v in gen(5):\n    total += v\nassert total == 10\n"),
    "classes": ("class Stack:\n    def __init__(self):\n        self.items = []\n    def push(self, x):\n"
                "        self.items.append(x)\n        return self\n    def pop(self):\n"
                "        return self.items.pop()\n"
                "    def __len__(self):\n        return len(self.items)\n    def __iter__(self):\n"
                "        return iter(self.items)\n    def __getitem__(self, i):\n        return self.items[i]\n"
                "    def __str__(self):\n        return 'Stack%r' % (self.items,)\n"
                "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n"
                "    def __add__(self, o):\n        return Point(self.x + o.x, self.y + o.y)\n"
                "    def __lt__(self, o):\n        return (self.x, self.y) < (o.x, o.y)\n"
                "class Child(Point):\n    pass\n",
                "s = Stack()\ns.push(1).push(2)\nassert len(s) == 2 and s[0] == 1 and list(s) == [1, 2]\n"
                "assert str(s) == 'Stack[1, 2]' and s.pop() == 2 and s.items == [1]\n"
                "p = Point(1, 2) + Point(3, 4)\nassert (p.x, p.y) == (4, 6)\n"
                "assert isinstance(p, Point) and not isinstance(p, Child) and issubclass(Child, Point)\n"
                "p.x = 10\nassert p.x == 10\n"
                "assert [q.x for q in sorted([Point(2, 0), Point(1, 0)])] == [1, 2]\n"
                "a = Point(0, 0)\nassert a is a and s.push(3) is s\n"
                "import copy\nt = copy.deepcopy(s)\nt.push(4)\nassert s.items == [1, 3] and t.items == [1, 3, 4]\n"),
    "exceptions": ("class TooSmall(ValueError):\n    pass\ndef check(x):\n    if x < 0:\n"
                   "        raise TooSmall('negative: %d' % x)\n    return x\ndef lookup(d, k):\n    return d[k]\n"
                   "def boom():\n    raise RuntimeError('boom', 3)\ndef gen_fail():\n    yield 1\n"
                   "    raise IndexError('late')\n",
                   "try:\n    check(-1)\nexcept ValueError as e:\n    assert str(e) == 'negative: -1'\nelse:\n"
                   "    raise AssertionError\n"
                   "try:\n    lookup({}, 'k')\nexcept KeyError as e:\n    assert e.args == ('k',)\n"
                   "try:\n    boom()\nexcept RuntimeError as e:\n    assert e.args == ('boom', 3)\n"
                   "g = gen_fail()\nassert next(g) == 1\ntry:\n    next(g)\nexcept IndexError:\n    pass\n"
                   "assert check(3) == 3\n"),
    "values": ("import math\nfrom collections import Counter, OrderedDict, defaultdict\nfrom math import sqrt\n"
               "LIMIT = 10 ** 30\nTABLE = {'a': [1, (2, 3)], 4: {5, 6}, (7,): frozenset({8})}\n"
               "def values():\n    return [-0.0, float('nan'), float('inf'), -float('inf'), 1e300, 2 ** 100, -2 ** 70,"
               " 3 + 4j, complex(float('inf'), -1), b'\\x00\\xff', 'caf\\u00e9 \\ud800', None, True, (), set(),"
               " frozenset(), {}, [[[]]]]\n"
               "def counts(s):\n    return Counter(s)\ndef grouped(xs):\n    d = defaultdict(list)\n"
               "    for x in xs:\n        d[x % 2].append(x)\n    return d\ndef ordered():\n"
               "    return OrderedDict([('b', 1), ('a', 2)])\ndef cyclic():\n    x = [1]\n    x.append(x)\n"
               "    return x\ndef big():\n    return list(range(3 * 10 ** 5))\n"
               "def deep(n):\n    x = []\n    for _ in range(n):\n        x = [x]\n    return x\n",
               "import math\nv = values()\n"
               "assert str(v[0]) == '-0.0' and v[1] != v[1] and v[2] == math.inf and v[3] == -math.inf\n"
               "assert v[4:7] == [1e300, 2 ** 100, -2 ** 70] and v[7] == 3 + 4j and v[8] == complex(math.inf, -1)\n"
               "assert v[9:] == [b'\\x00\\xff', 'caf\\u00e9 \\ud800', None, True, (), set(), frozenset(), {}, [[[]]]]\n"
               "assert [type(x) for x in v[12:17]] == [bool, tuple, set, frozenset, dict]\n"
               "assert LIMIT == 10 ** 30 and TABLE == {'a': [1, (2, 3)], 4: {5, 6}, (7,): frozenset({8})}\n"
               "assert math.sqrt(sqrt(16)) == 2.0\n"
               "assert counts('aab') == {'a': 2, 'b': 1} and counts('aab')['a'] == 2\n"
               "assert counts('aab').most_common(1) == [('a', 2)]\n"
               "g = grouped([1, 2, 3])\nassert g == {1: [1, 3], 0: [2]} and g[5] == []\n"
               "assert list(ordered()) == ['b', 'a'] and ordered() == {'a': 2, 'b': 1}\n"
               "assert cyclic()[0] == 1\n"
               "assert len(deep(10)) == 1 and str(deep(3)) == '[[[[]]]]'\n"
               "assert deep(30) == deep(30)\n"
               "b = big()\nassert len(b) == 3 * 10 ** 5 and b[-1] == 3 * 10 ** 5 - 1\n"
               "d = deep(200)  # deeper than the wire copies: the innermost levels are the program's\n"
               "for _ in range(199):\n    d = d[0]\nassert len(d) == 1 and d[0] == []\n"),
    "printing": ("def f():\n    print('in f')\n    return 1\nprint('loaded')\n",
                 "print('a')\nassert f() == 1\nprint('b')\n"),
}


def test_honest_programs_of_many_shapes_pass(box):
    names = sorted(HONEST_SHAPES)
    results = box.run_many([HONEST_SHAPES[n] for n in names])
    for name, r in zip(names, results):
        assert r.passed, (name, r)
    printing = results[names.index("printing")]
    assert printing.stdout_tail.split() == ["loaded", "a", "in", "f", "b"]


def test_cross_process_failures_are_still_failures(box):
    """What the program swallows of the tests' failures, and what it cannot hand over as values, still fails."""
    cases = [
        # a test assertion inside a callback fails even though the program catches the AssertionError
        ("def run(check):\n    try:\n        check(1)\n    except AssertionError:\n        pass\n",
         "def check(v):\n    assert v == 2\nrun(check)\n"),
        # StopIteration from a plain call cannot end the tests' map() early and make all() vacuously true
        ("def ok(x):\n    raise StopIteration\n", "assert all(map(ok, [1, 2, 3]))\n"),
        # a global the program changes after loading is the tests' copy from the end of loading
        ("n = 0\ndef bump():\n    global n\n    n += 1\n", "bump()\nassert n == 1\n"),
        # the program's own objects are not values the tests compare
        ("class A:\n    pass\ndef f():\n    return A()\n", "assert f() == f()\n"),
        # the tests' objects: plain attributes are readable by the program, methods and dunders are not
        ("def name_of(o):\n    return o.__class__.__name__\n", "class T:\n    pass\nassert name_of(T()) == 'T'\n"),
    ]
    results = box.run_many(cases)
    statuses = [(r.status, r.returncode) for r in results]
    assert statuses == [("failed", 11), ("failed", 11), ("failed", 11), ("failed", 16), ("failed", 11)], \
        [r.stderr_tail for r in results]


def test_wire_decoder_builds_only_values():
    """The judge's decoder: literals of built-in values and handles; every call, name or operator else refused."""
    from distlab.sandbox.runner import make_endpoint

    class Refused(Exception):
        pass

    def fatal(code, why):
        raise Refused(why)

    r, w = os.pipe()
    try:
        ep = make_endpoint(True, r, w, fatal=fatal, gone=lambda: None, flush=lambda: None,
                           import_module=lambda name: None)

        def decode(text):
            kind, elts = ep["guarded"](ep["parse"], text.encode())
            return ep["guarded"](ep["dec"], elts[1])

        value = [1, -2.5, float("inf"), 2 ** 80, -2 ** 80, 1 + 2j, "x\ud800", b"\0", None, (True,), {1, 2},
                 frozenset({3}), {"k": [()]}, set()]
        text = ep["encode"](("ok", value))
        assert decode(text) == value and "0x" in text
        assert decode("('x', -nan)") != decode("('x', -nan)") and decode("('x', 1+2j)") == 1 + 2j
        assert decode("('x', B('int'))") is int and type(decode("('x', R(3))")).__name__ == "Proxy"
        big = [list(range(-100, 100)), tuple(i / 7 for i in range(100)) + (float("-inf"), -0.0)]
        text = ep["encode"](big)
        assert "A('q'," in text and "A('d'," in text and decode("('x', %s)" % text) == big
        for bad in ("__import__('os')", "B('eval')", "B('getattr')", "CB(0)", "x", "a.b", "[i for i in ()]",
                    "f'{1}'", "1 if 1 else 2", "{**{}}", "(lambda: 1)", "R(-1)", "R('1')", "set([1])", "...",
                    "M('os', 1).system", "{[]}", "(1).real", "'a' + 'b'", "D('Counter', {}, 1)", "A('O', '00', False)",
                    "A('q', '00', False)", "A('q', 'zz', True)"):
            with pytest.raises(Refused):
                decode("('x', %s)" % bad)
    finally:
        os.close(r)
        os.close(w)
