"""Verdicts on honest programs, configuration, isolation detection: real processes throughout."""

import logging
import os

import pytest
from omegaconf import OmegaConf

from distlab.errors import DistlabError
from distlab.recipes.lm.sandbox import Sandbox, SandboxConfig, SandboxResult
from distlab.recipes.lm.sandbox.isolation import detect
from distlab.recipes.lm.sandbox.runner import rewrite_tests

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
    assert not bad_tests.passed and bad_tests.status == "error"


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
        b.run_many([(ADD, "assert add(1, 1) == 2"), (ADD, "assert add(1, 1) == 3"), ("import os; os._exit(0)", "")])
        assert b.stats["runs"] == 3 and b.stats["passed"] == 1 and b.stats["failed"] == 2
        assert b.stats["suspected_hacks"] == 1


def test_config_nests_in_omegaconf_and_checks_ranges():
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SandboxConfig), {"timeout_s": 2.5}))
    assert isinstance(cfg, SandboxConfig) and cfg.timeout_s == 2.5 and cfg.memory_mb == 1024 and cfg.workers >= 1
    assert cfg.isolation == "auto"
    with pytest.raises(DistlabError, match="out of range"):
        Sandbox(SandboxConfig(timeout_s=0))


def test_isolation_detected_once_and_logged():
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("distlab")
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    detect.cache_clear()
    try:
        with Sandbox(workers=1) as b:
            level = b.isolation.level
        with Sandbox(workers=1):
            pass
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    logged = [(r.levelname, r.getMessage()) for r in records if "isolation" in r.getMessage().lower()]
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
