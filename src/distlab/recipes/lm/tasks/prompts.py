"""What the policy is shown, and how its reply becomes a program, for chat and for plain-text models.

Two modes, because the GRPO/SCoRe recipes drive both instruct models (chat messages; the model code applies the
tokenizer's chat template) and base or from-scratch models (plain text). In text mode every non-HumanEval prompt ends
by opening a ```python fence, so the completion is bare code and generation can stop at the closing fence; HumanEval
(and MBPP rendered so, ``mbpp:docstring``) keeps its classic form, the completion continuing the function after its
docstring. A math task (``kind="math"``)
asks for the final answer in ``\\boxed{}`` (chat) or opens ``Solution:`` after ``Problem: ...`` (text; generation
stops at a blank line); its completion is checked as text (:mod:`.math_answer`), never run.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence

from distlab.errors import DistlabError
from distlab.recipes.lm.tasks.extract import extract_code
from distlab.recipes.lm.tasks.mbpp_docstring import SOURCE as DOCSTRING_SOURCE
from distlab.recipes.lm.tasks.task import Task

MODES = ("chat", "text")
FUNCTION_SOURCES = ("humaneval", DOCSTRING_SOURCE)  # task sources whose prompt is a function to continue
CHAT_INSTRUCTION = "Reply with the Python code in one ```python block."
HUMANEVAL_CHAT_INSTRUCTION = "Complete this Python function. Reply with the whole function in one ```python block."
FENCE_OPEN = "```python\n"
FENCE_CLOSE = "```"
MATH_CHAT_INSTRUCTION = "Solve the problem step by step and put the final answer in \\boxed{}."
MATH_TEXT_LEAD = "Solution:"
MATH_TEXT_STOPS: tuple[str, ...] = ("\n\n", "\nProblem:")
# Where a continuation of a HumanEval prompt has finished the function and started something else.
HUMANEVAL_TEXT_STOPS: tuple[str, ...] = ("\nclass ", "\ndef ", "\nif __name__", "\nprint(", "\nassert ", "\n#",
                                         "\n```")


def is_math(task: Task) -> bool:
    return task.kind == "math"


def continues_function(task: Task) -> bool:
    """HumanEval's form: the prompt is a function head and docstring, the reply its body (text mode) or the whole
    function (chat); MBPP rendered that way (:mod:`.mbpp_docstring`) is asked and judged the same."""
    return task.source in FUNCTION_SOURCES


def chat_instruction(task: Task) -> str:
    """What a chat prompt asks for after the problem: one python block, or a boxed final answer."""
    return MATH_CHAT_INSTRUCTION if is_math(task) else CHAT_INSTRUCTION


def text_lead(task: Task) -> str:
    """How a text-mode prompt (and SCoRe's turn-2 prompt) opens the answer: a python fence or ``Solution:``."""
    return MATH_TEXT_LEAD if is_math(task) else FENCE_OPEN


def _chat_content(task: Task) -> str:
    if is_math(task):
        return f"{task.prompt}\n{MATH_CHAT_INSTRUCTION}"
    if continues_function(task):
        return f"{HUMANEVAL_CHAT_INSTRUCTION}\n\n{FENCE_OPEN}{task.prompt.rstrip()}\n{FENCE_CLOSE}"
    return f"{task.prompt}\n{CHAT_INSTRUCTION}"


def _chat_answer(task: Task) -> str:
    if is_math(task):
        return f"{task.solution.strip()}\nThe final answer is \\boxed{{{task.answer}}}."
    return f"{FENCE_OPEN}{task.solution.strip()}\n{FENCE_CLOSE}"


def chat_messages(task: Task, *, system: str | None = None,
                  few_shot: Sequence[Task] = ()) -> list[dict[str, str]]:
    """Messages for a chat template; ``few_shot`` tasks become earlier user/assistant turns with their solutions."""
    messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
    for shot in few_shot:
        _need_solution(shot)
        messages += [{"role": "user", "content": _chat_content(shot)},
                     {"role": "assistant", "content": _chat_answer(shot)}]
    messages.append({"role": "user", "content": _chat_content(task)})
    return messages


def _need_solution(task: Task) -> None:
    if not task.solution:
        raise DistlabError(f"task {task.task_id} has no reference solution, so it cannot be a few-shot example")


def _text_block(task: Task) -> str:
    if is_math(task):
        return f"Problem: {task.prompt}\n{MATH_TEXT_LEAD}"
    if continues_function(task):
        return task.prompt
    return f"{task.prompt}\n{FENCE_OPEN}"


def text_completion(task: Task) -> str:
    """The reference completion for ``text_prompt(task)``: the target of a supervised warm-up."""
    _need_solution(task)
    if is_math(task):
        return f" {task.solution.strip()}\n\n"
    if continues_function(task):
        return task.solution[len(task.prompt):] if task.solution.startswith(task.prompt) else task.solution
    return f"{task.solution.strip()}\n{FENCE_CLOSE}"


def text_prompt(task: Task, *, few_shot: Sequence[Task] = ()) -> str:
    """Plain-text prompt; ``few_shot`` tasks are shown first, each followed by its reference completion."""
    shots = "".join(f"{_text_block(s)}{text_completion(s)}\n\n" for s in few_shot)
    return shots + _text_block(task)


def stop_strings(task: Task, mode: str = "text") -> tuple[str, ...]:
    """Strings after which generation can stop: everything past them is thrown away by ``build_program`` anyway."""
    _check_mode(mode)
    if mode == "chat":
        return ()
    if is_math(task):
        return MATH_TEXT_STOPS
    return HUMANEVAL_TEXT_STOPS if continues_function(task) else (FENCE_CLOSE,)


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise DistlabError(f"prompt mode {mode!r} is not one of {', '.join(MODES)}")


def _prompt_imports(prompt: str) -> str:
    try:
        body = ast.parse(prompt).body
    except SyntaxError:
        return ""
    lines = prompt.splitlines()
    return "\n".join("\n".join(lines[n.lineno - 1:n.end_lineno]) for n in body
                     if isinstance(n, (ast.Import, ast.ImportFrom)))


def build_program(task: Task, completion: str, mode: str = "chat") -> str:
    """The program the sandbox runs before ``task.tests``; ``""`` when the completion holds no usable code.

    Text mode cuts the completion at its first stop string (what follows is the model going on to a new problem),
    and for HumanEval joins the prompt in front, since the completion is the function's body. In chat mode the
    imports of a HumanEval prompt are put in front: a chat model rewriting the function often drops
    ``from typing import List``, and its annotations would then fail for a reason the benchmark does not test.
    """
    _check_mode(mode)
    if is_math(task):
        raise DistlabError(f"task {task.task_id} is a math task: its answer is checked as text, not run as a program")
    if mode == "text":
        cut = len(completion)
        for stop in stop_strings(task, "text"):
            at = completion.find(stop)
            if at != -1:
                cut = min(cut, at)
        completion = completion[:cut]
        if continues_function(task):
            return extract_code(task.prompt + completion, task.entry_point)
        return extract_code(completion, task.entry_point)
    code = extract_code(completion, task.entry_point)
    if code and continues_function(task):
        header = _prompt_imports(task.prompt)
        if header:
            code = f"{header}\n\n{code}"
    return code


# ---------------------------------------------------------------- chat rendering and a task's whole prompt
# Instruct models only answer well when the prompt follows their own chat format (SmolLM2 uses ChatML with a
# default system turn). The template shipped with the tokenizer is the authority; a base model without one gets
# plain text so the same recipe code runs on either.
Message = Mapping[str, str]


def render_prompt(tokenizer, messages: str | Sequence[Message], add_generation_prompt: bool = True) -> str:
    """The prompt text for ``messages`` (a list of ``{"role", "content"}``; a bare string is one user turn).

    With a chat template the tokenizer's own rendering is returned, ending with the assistant header
    when ``add_generation_prompt``. Without one: a single user message is its content unchanged (a
    base model continues it), several turns become ``Role: content`` lines ending in ``Assistant:``.
    """
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    messages = [dict(m) for m in messages]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    if len(messages) == 1 and messages[0]["role"] == "user":
        return messages[0]["content"]
    text = "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages)
    return text + ("Assistant:" if add_generation_prompt else "")


def prompt_text(task: Task, tokenizer, mode: str, few_shot: list[Task]) -> str:
    if mode == "chat":
        return render_prompt(tokenizer, chat_messages(task, few_shot=few_shot))
    return text_prompt(task, few_shot=few_shot)


def stops_for(tasks: list[Task], mode: str) -> tuple[str, ...]:
    return tuple(sorted({s for t in tasks for s in stop_strings(t, mode)}))
