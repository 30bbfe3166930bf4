"""The two evaluation harnesses side by side, one test per difference that needs no sandbox: the prompt's wording,
the test shown, the stop strings, code extraction from a reply, HumanEval's imports, and the float tolerance and
time budget EvalPlus's judging uses (the sandbox runs of those are in tests/sandbox/test_evalplus_judging.py)."""

from __future__ import annotations

import ast

import pytest
from chatml import ChatML

from distlab.recipes.lm.harnesses.evalplus_extract import evalplus_program, longest_valid_run, sanitize
from distlab.recipes.lm.harnesses.evalplus_judge import (HELPER, HELPER_SOURCE, count_asserts, task_atol,
                                                         time_limit, tolerant_tests)
from distlab.recipes.lm.harnesses.evalplus_prompt import (CHAT_END, END_STRINGS, INSTRUCTION, RESPONSE,
                                                          evalplus_prompt, evalplus_stops, first_assert, is_direct,
                                                          problem_text)
from distlab.recipes.lm.rollout.stops import first_stop
from distlab.recipes.lm.tasks import Task, build_program, load_mbpp
from distlab.recipes.lm.tasks.prompts import prompt_text, stops_for


class NoTemplate:
    chat_template = None


def _mbpp_task(prompt="Write a function to add one.", visible="assert add_one(1) == 2", tests=None,
               task_id="mbpp-sanitized/900", entry="add_one", solution="def add_one(x):\n    return x + 1\n"):
    full = f"{prompt}\nYour code should pass this test:\n{visible}"
    return Task(task_id, full, entry, tests or f"{visible}\nassert add_one(2) == 3\n", visible, "mbpp-sanitized",
                solution)


HUMANEVAL = Task("HumanEval/0", 'from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    """Sum."""\n',
                 "total", "def check(candidate):\n    assert candidate([1, 2]) == 3\n\ncheck(total)\n", "",
                 "humaneval")


# -- the prompt's wording and the test shown ------------------------------------------------------------------------

def test_the_chat_prompt_asks_for_a_script_and_begins_the_reply_with_an_open_python_fence():
    task = _mbpp_task()
    ours, theirs = prompt_text(task, ChatML(), "chat", []), evalplus_prompt(task, ChatML(), direct=False)
    assert "Your code should pass this test:" in ours and "Reply with the Python code in one ```python block." in ours
    assert ours.endswith("<|im_start|>assistant\n")  # the model writes the whole reply
    user = (f'{INSTRUCTION}\n```\n"""\nWrite a function to add one.\nassert add_one(1) == 2\n"""\n```\n')
    assert theirs == f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n{RESPONSE}\n```python\n"
    assert "Your code should pass" not in theirs


def test_evalplus_shows_the_first_assert_alone_where_distlab_shows_its_imports(mbpp_dir):
    task = next(t for t in load_mbpp("sanitized", mbpp_dir) if t.visible_test.startswith("import math"))
    assert "import math" in prompt_text(task, ChatML(), "chat", [])
    shown = problem_text(task)
    assert "import math" not in shown and first_assert(task.visible_test) in shown
    assert shown.startswith('"""\n') and shown.endswith('\n"""\n') and shown.count("assert ") == 1
    assert first_assert("import math\nassert f(1) == 2\nassert f(2) == 3") == "assert f(1) == 2"


def test_every_sanitized_task_becomes_a_docstring_of_its_text_and_one_assert(mbpp_dir):
    for task in load_mbpp("sanitized", mbpp_dir):
        shown = problem_text(task)
        body = ast.parse(shown).body
        assert len(body) == 1 and isinstance(body[0].value, ast.Constant), task.task_id
        assert "Your code should pass" not in shown and shown.count("\nassert ") == 1, task.task_id


def test_direct_completion_is_evalplus_s_own_prompt_for_models_without_a_chat_template():
    task = _mbpp_task()
    assert is_direct(NoTemplate(), "chat") and is_direct(ChatML(), "text") and not is_direct(ChatML(), "chat")
    want = '"""\nWrite a function to add one.\nassert add_one(1) == 2\n"""\n'
    assert evalplus_prompt(task, NoTemplate(), direct=True) == want
    assert evalplus_prompt(HUMANEVAL, NoTemplate(), direct=True) == HUMANEVAL.prompt.strip() + "\n"


# -- stop strings -----------------------------------------------------------------------------------------------------

def test_stop_strings_of_each_harness():
    mbpp = [_mbpp_task()]
    assert stops_for(mbpp, "chat") == () and stops_for(mbpp, "text") == ("```",)
    assert evalplus_stops(mbpp, direct=False) == END_STRINGS + (CHAT_END,)
    assert evalplus_stops(mbpp, direct=True) == END_STRINGS + ('\n"""', "\nassert")
    assert set(evalplus_stops([HUMANEVAL], direct=True)) - set(END_STRINGS) == {
        "\ndef ", "\nclass ", "\nimport ", "\nfrom ", "\nassert "}


def test_no_evalplus_stop_ends_a_chat_reply_inside_its_function():
    reply = ("def add_one(x):\n    print(x)\n    if __name__:\n        pass\n    return x + 1\n```\n\n"
             "Example:\nprint(add_one(1))\n")
    cut = reply[:first_stop(reply, evalplus_stops([_mbpp_task()], direct=False))]
    assert cut == "def add_one(x):\n    print(x)\n    if __name__:\n        pass\n    return x + 1"
    # distlab's text mode stops at any fence, also one opened inside the reply before its code
    assert first_stop("```python\ndef f(): ...", stops_for([_mbpp_task()], "text")) == 0


# -- code extraction ------------------------------------------------------------------------------------------------

def test_a_helper_built_by_a_call_survives_evalplus_extraction_only():
    reply = ("Here is the code:\n```python\nimport re\nPATTERN = re.compile(r'\\d+')\n\n"
             "def digits(s):\n    return PATTERN.findall(s)\n```\nIt finds the digits.")
    task = _mbpp_task(entry="digits")
    assert "PATTERN = re.compile" in evalplus_program(reply, "digits")
    assert "PATTERN" not in build_program(task, reply, "chat").split("def digits")[0]


def test_decorated_and_return_less_functions_survive_distlab_extraction_only():
    cached = "```python\nfrom functools import lru_cache\n\n@lru_cache(None)\ndef fib(n):\n    return n\n```"
    assert evalplus_program(cached, "fib") == "from functools import lru_cache"
    assert "def fib" in build_program(_mbpp_task(entry="fib"), cached, "chat")
    in_place = "```python\nimport heapq\n\ndef sort_it(xs):\n    xs.sort()\n```"
    assert evalplus_program(in_place, "sort_it") == "import heapq"
    assert evalplus_program("def sort_it(xs):\n    xs.sort()", "sort_it") == "def sort_it(xs):\n    xs.sort()"  # rule 4
    assert "def sort_it" in build_program(_mbpp_task(entry="sort_it"), in_place, "chat")


def test_evalplus_keeps_what_the_entry_point_reaches_in_the_longest_run_that_parses():
    reply = ("```python\ndef helper(x):\n    return x * 2\n\ndef unused():\n    return 0\n\n"
             "def twice(x):\n    return helper(x)\n\nprint(twice(2))\n```\nand a second block:\n"
             "```python\ndef later(x):\n    return x\n```")
    program = evalplus_program(reply, "twice")
    assert program == "def helper(x):\n    return x * 2\ndef twice(x):\n    return helper(x)"
    assert "def later" in build_program(_mbpp_task(entry="twice"), reply, "chat")  # distlab joins every block
    assert longest_valid_run("Some prose.\nx = 1\ny = 2\nmore prose") == "x = 1\ny = 2"
    assert longest_valid_run("only prose here") == "only prose here"
    assert sanitize("x = 1\nprint(x)", None) == "x = 1"


def test_a_direct_completion_is_joined_to_its_prompt_and_tabs_become_spaces():
    prompt = '"""\nWrite a function to add one.\nassert add_one(1) == 2\n"""\n'
    assert evalplus_program("def add_one(x):\n\treturn x + 1\n", "add_one", prompt) == \
        "def add_one(x):\n    return x + 1"


def test_humaneval_chat_programs_get_the_prompt_s_imports_under_distlab_only():
    reply = "```python\ndef total(xs: List[int]) -> int:\n    return sum(xs)\n```"
    assert build_program(HUMANEVAL, reply, "chat").startswith("from typing import List")
    assert "typing" not in evalplus_program(reply, "total")


# -- float tolerance and the time budget -----------------------------------------------------------------------------

def test_numeric_asserts_are_compared_with_evalplus_s_tolerance():
    tests = "assert area(1) == 3.14159\nassert f(2) == [0.5, 1.5]\nassert g(1) == 2\nassert h('a') == 'b'\n"
    out = tolerant_tests(tests)
    calls = [n for n in ast.walk(ast.parse(out)) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == HELPER]
    assert [(ast.unparse(c.args[0]), ast.literal_eval(c.args[1]), c.args[2].value) for c in calls] == [
        ("area(1)", 3.14159, 1e-6), ("f(2)", [0.5, 1.5], 1e-6)]
    assert "assert g(1) == 2" in out and "assert h('a') == 'b'" in out  # exact: no float expected
    loose = tolerant_tests("assert g(1) == 2\n", task_atol(_mbpp_task(task_id="mbpp-sanitized/82")))
    assert HELPER in loose and "0.0001" in loose
    assert tolerant_tests("assert math.isclose(f(1), 2.5)\n") == "assert math.isclose(f(1), 2.5)\n"
    assert task_atol(_mbpp_task(task_id="mbpp/83")) == 0.0


def test_the_helper_compares_as_evalplus_does():
    namespace: dict = {}
    exec(HELPER_SOURCE, namespace)
    close = namespace[HELPER]
    assert close(0.1 + 0.2, 0.3, 1e-6) and close([0.1 + 0.2, 1.0], [0.3, 1.0], 1e-6)
    assert not close(0.3001, 0.3, 1e-6) and not close((0.3,), [0.3], 1e-6) and not close([0.3], [0.3, 1.0], 1e-6)
    assert not close("0.3", 0.3, 1e-6) and close(1e9 + 50.0, 1e9, 1e-6)  # rtol 1e-7 of 1e9 is 100


@pytest.mark.parametrize("n, reference_s, budget", [(3, None, 5.0), (3, 0.5, 7.0), (2, 100.0, 62.0)])
def test_time_budget_per_problem(n, reference_s, budget):
    assert time_limit(n, reference_s) == pytest.approx(budget)


def test_test_inputs_are_counted_inside_functions_too():
    assert count_asserts(HUMANEVAL.tests) == 1 and count_asserts("x = 1\n") == 1
    assert count_asserts("assert f(1)\nassert f(2)\nassert f(3)\n") == 3
