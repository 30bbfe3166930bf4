"""The prompt a task becomes for a model, and the strings at which its completion stops."""

from __future__ import annotations

from distlab.recipes.lm.chat import render_prompt
from distlab.recipes.lm.tasks import Task, chat_messages, stop_strings, text_prompt


def prompt_text(task: Task, tokenizer, mode: str, few_shot: list[Task]) -> str:
    if mode == "chat":
        return render_prompt(tokenizer, chat_messages(task, few_shot=few_shot))
    return text_prompt(task, few_shot=few_shot)


def stops_for(tasks: list[Task], mode: str) -> tuple[str, ...]:
    return tuple(sorted({s for t in tasks for s in stop_strings(t, mode)}))
