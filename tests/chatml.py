"""A tokenizer stand-in with a ChatML chat template (SmolLM2's and Qwen's shape), rendered without jinja: for tests of
prompts that only need the template's layout, not a real vocabulary."""

from __future__ import annotations


class ChatML:
    chat_template = "chatml"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")
