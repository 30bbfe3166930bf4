"""A CUDA out-of-memory error, anywhere in a run, told as one line a person can act on.

PyTorch's message is a paragraph about allocator internals. What helps is how much memory the run
needs by the doctor's arithmetic (``distlab doctor --recipe``), how much the device has, and the
switches that lower it.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch

OPTIONS = ("dist.activation_checkpointing=blocks", "optim.state_dtype=int8", "dist.auto_micro_batch=true",
           "dist.wrap=fsdp", "a smaller batch")


def adjust_for_state_dtype(spec: Any, state_dtype: str) -> Any:
    """A ModelSpec whose Adam state is counted at ``optim.state_dtype`` (bf16 and int8 moments are smaller)."""
    state_dtype = getattr(state_dtype, "value", state_dtype)
    if state_dtype == "fp32" or getattr(spec, "optimizer", None) not in ("adam", "adamw"):
        return spec
    return dataclasses.replace(spec, optimizer=f"adam_{state_dtype}")


def estimate_text(recipe: Any, cfg: Any, world_size: int) -> str:
    """``doctor estimates X GiB per device (weights ..., optimizer ..., activations ...)`` or '' if unknown."""
    if recipe.model_spec is None:
        return ""
    from distlab.doctor.memory import estimate_memory

    specs = recipe.model_spec(cfg)
    specs = specs if isinstance(specs, list) else [specs]
    strategy = "fsdp" if getattr(cfg.dist.wrap, "value", cfg.dist.wrap) == "fsdp" else "ddp"
    parts = [estimate_memory(adjust_for_state_dtype(s, cfg.optim.state_dtype), strategy=strategy,
                             world_size=world_size) for s in specs]
    gib = 2**30
    total = sum(p.total for p in parts) / gib
    weights = sum(p.params + p.grads + p.master_weights for p in parts) / gib
    optim = sum(p.optimizer for p in parts) / gib
    acts = sum(p.activations for p in parts) / gib
    return (f"`distlab doctor --recipe {recipe.name}` estimates {total:.1f} GiB per device (weights+grads "
            f"{weights:.1f}, optimizer {optim:.1f}, activations {acts:.1f})")


def device_text() -> str:
    if not torch.cuda.is_available():
        return ""
    index = torch.cuda.current_device()
    total = torch.cuda.get_device_properties(index).total_memory / 2**30
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
