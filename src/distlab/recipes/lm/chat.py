"""Turning chat messages into the prompt text a model was trained to continue.

Instruct models only answer well when the prompt follows their own chat format (SmolLM2 uses ChatML
with a default system turn). The template shipped with the tokenizer is the authority; a base model
without one gets plain text so the same recipe code runs on either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
