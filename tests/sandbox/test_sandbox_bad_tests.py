"""Tests that cannot judge a program get their own status: never a pass, never blamed on the program."""

from distlab.sandbox import Sandbox
from distlab.sandbox.sandbox import judging_problem

PROGRAM = "def f():\n    return 1\n"


def test_empty_and_broken_tests_are_named_and_nothing_runs():
    assert judging_problem("assert f() == 1\n") is None
    assert "no statement" in judging_problem("")
    assert "no statement" in judging_problem("# a comment\n'''a docstring'''\npass\n")
    assert "line 2" in judging_problem("assert f() == 1\nassert f( == 1\n")
    with Sandbox(workers=1, timeout_s=2) as box:
        empty, broken, crash, good = (box.run(PROGRAM, t) for t in
                                      ("", "assert f( == 1\n", "assert f() == 1\n", "assert f() == 1\n"))
        crash = box.run("raise ValueError('boom')\n", "assert f() == 1\n")
        stats = dict(box.stats)
    assert (empty.status, empty.passed, empty.seconds) == ("bad_tests", False, 0.0)
    assert broken.status == "bad_tests" and "do not compile" in broken.stderr_tail
    assert crash.status == "error" and good.passed  # a crashing program stays the program's error
    assert stats["bad_tests"] == 2 and stats["runs"] == 5
