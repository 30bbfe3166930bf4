"""A CUDA out-of-memory error, anywhere in a run, told as one line a person can act on.

PyTorch's message is a paragraph about allocator internals. What helps is how much memory the run
needs by the doctor's arithmetic (:mod:`distlab.memory.estimate`, as ``distlab doctor --recipe`` prints
it), how much the device has, and the switches that lower it.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from distlab.memory.estimate import estimate_memory, recipe_specs

OPTIONS = ("dist.activation_checkpointing=blocks", "optim.state_dtype=int8", "dist.auto_micro_batch=true",
           "dist.wrap=fsdp", "a smaller batch")


def estimate_text(recipe: Any, cfg: Any, world_size: int) -> str:
    """``doctor estimates X GiB per device (weights ..., optimizer ..., activations ...)`` or '' if unknown."""
    specs = recipe_specs(recipe, cfg)
    if specs is None:
        return ""
    strategy = "fsdp" if cfg.dist.wrap == "fsdp" else "ddp"
    parts = [estimate_memory(s, strategy=strategy, world_size=world_size)
             for s in (specs if isinstance(specs, list) else [specs])]
    gib = 2**30
    total = sum(p.total for p in parts) / gib
    weights = sum(p.params + p.grads for p in parts) / gib
    optim = sum(p.optimizer for p in parts) / gib
    acts = sum(p.activations for p in parts) / gib
    return (f"`distlab doctor --recipe {recipe.name}` estimates {total:.1f} GiB per device (weights+grads "
            f"{weights:.1f}, optimizer {optim:.1f}, activations {acts:.1f})")


def device_text() -> str:
    if not torch.cuda.is_available():
        return ""
    index = torch.cuda.current_device()
    total = torch.cuda.get_device_properties(index).total_memory / 2**30
    fraction = getattr(torch.cuda, "get_per_process_memory_fraction", lambda _: 1.0)(index)  # torch >= 2.x only
    if fraction < 1.0:  # a capped process (set_per_process_memory_fraction) may use only its share
        return f"cuda:{index} allows this process {total * fraction:.1f} of its {total:.1f} GiB"
    return f"cuda:{index} has {total:.1f} GiB"


def oom_message(recipe: Any, cfg: Any, rank: int | str = 0) -> str:
    """One line: where it ran out, the estimate, the capacity and the options that lower memory."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    try:
        estimate = estimate_text(recipe, cfg, world)
    except Exception:  # the estimate is a hint; never let it hide the out-of-memory report
        estimate = ""
    facts = "; ".join(x for x in (estimate, device_text()) if x)
    return (f"CUDA out of memory on rank {rank}" + (f": {facts}" if facts else "")
            + f". To fit, try {', '.join(OPTIONS)}")
