"""Load a recipe's language models and put each where its placement says."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from distlab.placement import DTYPES, place
from distlab.recipes.lm.chat import render_prompt
from distlab.recipes.lm.model_parts import decoder_layers
from distlab.recipes.lm.model_source import load_causal_lm
from distlab.recipes.lm.settings import ModelConfig
from distlab.recipes.lm.tasks import Task, chat_messages, stop_strings, text_prompt


def load_placed(name: str, cfg: Any, session, seed: int, lora: bool = True) -> tuple[nn.Module, Any]:
    """``(placed model, tokenizer)`` for model ``name`` of the recipe config (``cfg.models``/``cfg.placement``).

    Weights load on the CPU in the model's dtype, then move once; every rank loads the same source, and
    ``dist.verify_init`` proves they agree before anything is wrapped.
    """
    m: ModelConfig = cfg.model
    settings = cfg.models[name]
    trainable = settings.trainable
    model, tok = load_causal_lm(m.source, dtype=DTYPES[settings.dtype], device="cpu",
                                lora_r=m.lora_r if (trainable and lora) else 0,
                                lora_alpha=m.lora_alpha or None,
                                gradient_checkpointing=m.gradient_checkpointing and trainable,
                                attn_implementation=m.attn_implementation, seed=seed)
    if trainable and cfg.dist.verify_init:
        session.rt.verify_identical(model, f"initial {name} parameters")
    placed = place(name, model, cfg.placement[name], settings, session.rt, cfg.dist,
                   shard_modules=decoder_layers(model) if trainable else None)
    return placed, tok


@contextlib.contextmanager
def gathered(model: nn.Module) -> Iterator[None]:
    """FSDP2: all-gather the parameters once around generation, not once per decoded token."""
    fsdp = [m for m in model.modules() if hasattr(m, "unshard") and hasattr(m, "set_reshard_after_forward")]
    if not fsdp:
        yield
        return
    for m in fsdp:
        m.set_reshard_after_forward(False)
    model.unshard()
    try:
        yield
    finally:
        for m in fsdp:
            m.set_reshard_after_forward(True)
        model.reshard()


def prompt_text(task: Task, tokenizer, mode: str, few_shot: list[Task]) -> str:
    if mode == "chat":
        return render_prompt(tokenizer, chat_messages(task, few_shot=few_shot))
    return text_prompt(task, few_shot=few_shot)


def stops_for(tasks: list[Task], mode: str) -> tuple[str, ...]:
    return tuple(sorted({s for t in tasks for s in stop_strings(t, mode)}))


def sequences(prompt_ids: list[list[int]], completion_ids: list[list[int]], pad: int, device: torch.device
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``prompt + completion`` rows, their attention mask and the completion-token mask."""
    lengths = [len(p) + len(c) for p, c in zip(prompt_ids, completion_ids)]
    width = max(lengths)
    ids = torch.full((len(lengths), width), pad, dtype=torch.long)
    attn = torch.zeros((len(lengths), width), dtype=torch.long)
    comp = torch.zeros((len(lengths), width), dtype=torch.bool)
    for i, (p, c) in enumerate(zip(prompt_ids, completion_ids)):
        row = p + c
        ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        attn[i, :len(row)] = 1
        comp[i, len(p):len(row)] = True
    return ids.to(device), attn.to(device), comp.to(device)
