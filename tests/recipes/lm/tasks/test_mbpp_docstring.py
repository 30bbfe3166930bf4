"""MBPP asked the way HumanEval asks (``mbpp:docstring``): exact prompts of two real problems, checked by hand; the
reference body completes every prompt into a passing program; the prompt style follows HumanEval's in both modes."""

from pathlib import Path

import pytest

from distlab.errors import DistlabError
from distlab.recipes.lm.tasks import build_program, load_tasks, text_completion, text_prompt
from distlab.recipes.lm.tasks import humaneval as humaneval_module
from distlab.recipes.lm.tasks.mbpp import DEFAULT_MBPP_DIR
from distlab.recipes.lm.tasks.mbpp_docstring import example_lines
from distlab.recipes.lm.tasks.prompts import (HUMANEVAL_CHAT_INSTRUCTION, HUMANEVAL_TEXT_STOPS, chat_messages,
                                              stop_strings)
from distlab.sandbox import Sandbox

# mbpp/602 as it is in mbpp.jsonl: text "Write a python function to find the first repeated character in a given
# string.", code 'def first_repeated_char(str1):\r\n  for index,c in enumerate(str1): ...', first assert
# 'assert first_repeated_char("abcabc") == "a"'.
PROMPT_602 = '''def first_repeated_char(str1):
    """Write a python function to find the first repeated character in a given string.
    >>> first_repeated_char("abcabc")
    "a"
    """
'''
BODY_602 = '''    for index, c in enumerate(str1):
        if str1[:index + 1].count(c) > 1:
            return c
    return 'None'
'''
# mbpp/601: the solution defines class Pair (tab-indented) before max_chain_length, and the tests build Pairs, so
# the class is shown above the head (as HumanEval/10 shows its helper) and the tab-indented body is re-indented.
PROMPT_601 = '''class Pair(object):
\tdef __init__(self, a, b):
\t\tself.a = a
\t\tself.b = b


def max_chain_length(arr, n):
    """Write a function to find the longest chain which can be formed from the given set of pairs.
    >>> max_chain_length([Pair(5, 24), Pair(15, 25),Pair(27, 40), Pair(50, 60)], 4)
    3
    """
'''


@pytest.fixture(scope="module")
def docstring_train():
    path = (Path(__file__).resolve().parents[4] / DEFAULT_MBPP_DIR).resolve()  # the shared copy, as conftest finds it
    if not (path / "mbpp.jsonl").is_file():
        pytest.skip(f"MBPP data not found at {path}")
    return {t.task_id: t for t in load_tasks("mbpp:docstring", "train", mbpp_dir=path)}, path


def test_two_real_problems_render_exactly_and_their_bodies_pass_in_the_sandbox(docstring_train):
    tasks, _ = docstring_train
    t602, t601 = tasks["mbpp-docstring/602"], tasks["mbpp-docstring/601"]
    assert t602.prompt == PROMPT_602 and t601.prompt == PROMPT_601
    assert text_completion(t602) == BODY_602
    assert (t602.entry_point, t601.entry_point) == ("first_repeated_char", "max_chain_length")
    assert t602.source == "mbpp-docstring" and t602.visible_test == ""  # the example is in the docstring
    assert "assert first_repeated_char(\"abc\") == \"None\"" in t602.tests  # every MBPP assert still judges
    programs = [build_program(t, text_completion(t), "text") for t in (t602, t601)]
    assert programs[1].startswith("class Pair(object):") and "def max_chain_length(arr, n):" in programs[1]
    with Sandbox(timeout_s=10, workers=2) as box:
        results = box.run_many([(p, t.tests) for p, t in zip(programs, (t602, t601))])
        assert [r.passed for r in results] == [True, True], results
        broken = box.run(build_program(t602, "    return 'None'\n", "text"), t602.tests)
        assert not broken.passed  # the tests can fail: a wrong body does not pass


def test_every_train_problem_renders_and_its_reference_body_completes_it(docstring_train, run_trusted):
    tasks, path = docstring_train
    plain = load_tasks("mbpp", "train", mbpp_dir=path)
    assert len(tasks) == len(plain) == 374  # every solution has a top-level entry function
    failures = {tid: err for tid, t in tasks.items()
                if (err := run_trusted(build_program(t, text_completion(t), "text"), t.tests))}
    assert not failures, list(failures.items())[:3]


def test_the_style_is_humanevals_in_both_modes(docstring_train):
    t = docstring_train[0]["mbpp-docstring/602"]
    assert stop_strings(t, "text") == HUMANEVAL_TEXT_STOPS
    assert text_prompt(t) == PROMPT_602  # text mode: the model continues the body
    content = chat_messages(t)[-1]["content"]
    assert content == f"{HUMANEVAL_CHAT_INSTRUCTION}\n\n```python\n{PROMPT_602.rstrip()}\n```"
    whole_function = f"```python\n{t.solution}```"
    assert build_program(t, whole_function, "chat").strip().endswith("return 'None'")


def test_doctest_example_falls_back_to_the_assert_when_not_a_call_equals_a_literal():
    assert example_lines("assert f(1, 2) == [3]\nassert f(0, 0) == []\n", "f") == [">>> f(1, 2)", "[3]"]
    assert example_lines("assert set(f(1)) == set([2])\n", "f") == [">>> assert set(f(1)) == set([2])"]
    assert example_lines("assert f(x) == y\n", "f") == [">>> assert f(x) == y"]  # y is not a literal


def test_humaneval_is_never_read(docstring_train, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("mbpp:docstring read HumanEval")

    monkeypatch.setattr(humaneval_module, "data_file", refuse)
    tasks = load_tasks("mbpp:docstring", "test", mbpp_dir=docstring_train[1])
    assert len(tasks) == 500 and all(t.task_id.startswith("mbpp-docstring/") for t in tasks)


@pytest.mark.parametrize("source, message", [
    ("mbpp:humaneval", "unknown MBPP prompt style 'humaneval' in 'mbpp:humaneval'; choose one of mbpp:docstring"),
    ("synthetic:docstring", "unknown task source 'synthetic:docstring'"),
])
def test_a_bad_style_is_one_line(source, message):
    with pytest.raises(DistlabError) as err:
        load_tasks(source, "train", n=4)
    assert message in str(err.value) and "\n" not in str(err.value)
