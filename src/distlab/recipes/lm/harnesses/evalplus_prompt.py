"""EvalPlus's prompts and stop strings (evalplus 0.3.1: ``codegen.py``, ``provider/utility.py``, ``provider/hf.py``).

Why reproduce them and not keep ours: the published Qwen2.5-Coder figures (MBPP 52.4, HumanEval 61.6) were measured
this way, and a model's score moves with the wording it is asked in. So the two instruction sentences below are
EvalPlus's own, word for word: they are the benchmark's protocol, not prose of ours.

- The problem is EvalPlus's task prompt: for MBPP a docstring holding the task text and its first assert (the
  test's imports and setup are not shown), for HumanEval the benchmark's own prompt.
- A model with a chat template gets one user turn asking for a self-contained script in a markdown block, the
  problem inside a plain fence; the assistant turn is begun for it with a sentence and an open python fence, so the
  reply is code from its first token. A model without one (or ``model.prompt_mode=text``) continues the problem
  itself ("direct completion"). Zero-shot either way: EvalPlus shows no solved examples.
- Generation stops at EvalPlus's end strings; a chat reply also at the closing fence. None of them can fall inside
  a function body (each starts a new line at column 0), so no stop ends a program early.
"""

from __future__ import annotations

import ast
import warnings

from distlab.recipes.lm.tasks.jsonl import without_visible_test
from distlab.recipes.lm.tasks.prompts import continues_function
from distlab.recipes.lm.tasks.task import Task

INSTRUCTION = ("Please provide a self-contained Python script that solves the following problem in a markdown code "
               "block:")
RESPONSE = ("Below is a Python script with a self-contained function that solves the problem and passes "
            "corresponding tests:")
# Where a reply has ended (EvalPlus's EOS list): special-token text, then lines that start running the program
END_STRINGS: tuple[str, ...] = ("<|endoftext|>", "<|endofmask|>", "</s>", "\nif __name__", "\ndef main(", "\nprint(")
CHAT_END = "\n```\n"
DIRECT_END = {"humaneval": ("\ndef ", "\nclass ", "\nimport ", "\nfrom ", "\nassert "), "mbpp": ('\n"""', "\nassert")}
_SPLIT = "\x00distlab-prefill\x00"  # cut mark inside the rendered assistant turn: no template emits it


def dataset_of(task: Task) -> str:
    """EvalPlus knows two datasets: HumanEval (a function to continue; MBPP rendered so goes with it) and MBPP (a
    text and an assert)."""
    return "humaneval" if continues_function(task) else "mbpp"


def first_assert(visible_test: str) -> str:
    """The first assert of a visible test, without the imports or setup shown with it (EvalPlus shows
    ``test_list[0]`` only)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            body = ast.parse(visible_test).body
    except (SyntaxError, ValueError):
        return visible_test.strip()
    asserts = [ast.get_source_segment(visible_test, n) for n in body if isinstance(n, ast.Assert)]
    return (asserts[0] if asserts and asserts[0] else visible_test).strip()


def problem_text(task: Task) -> str:
    """EvalPlus's task prompt, stripped and ending in one newline as its ``codegen`` passes it on."""
    if dataset_of(task) == "humaneval" or not task.visible_test.strip():
        return task.prompt.strip() + "\n"
    text = without_visible_test(task.prompt, task.visible_test)  # our prompt is the text plus this suffix
    return f'"""\n{text.strip()}\n{first_assert(task.visible_test)}\n"""\n'


def is_direct(tokenizer, mode: str) -> bool:
    """Direct completion, as EvalPlus decides it (no chat template), or asked for with ``model.prompt_mode=text``."""
    return mode == "text" or not getattr(tokenizer, "chat_template", None)


def evalplus_prompt(task: Task, tokenizer, direct: bool) -> str:
    """What the model is asked to continue."""
    text = problem_text(task)
    if direct:
        return text
    user = f"{INSTRUCTION}\n```\n{text.strip()}\n```\n"
    begun = f"{RESPONSE}\n```python\n{_SPLIT}\n```\n"
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": user},
                                              {"role": "assistant", "content": begun}], tokenize=False)
    return rendered.split(_SPLIT)[0]


def evalplus_stops(tasks: list[Task], direct: bool) -> tuple[str, ...]:
    """EvalPlus's end strings for these tasks: the common ones, then the closing fence (chat) or the strings that
    end a continued problem of each dataset present (direct)."""
    extra = sorted({s for t in tasks for s in DIRECT_END[dataset_of(t)]}) if direct else [CHAT_END]
    return END_STRINGS + tuple(extra)
