"""Per-device memory arithmetic: weights, gradients, optimizer state and activations of a recipe's models.

Two readers need the same numbers: ``distlab doctor`` (will it fit, and what to change) and the
one-line out-of-memory report of a failed run (:mod:`distlab.oom`). They live here, below both, so
the run-time core never reaches up into the doctor's command code.

The estimate is deliberately simple arithmetic a person can redo by hand. It is a lower bound (no
allocator fragmentation, no DDP bucket copies, no FSDP all-gather buffers).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass
from typing import Any

from distlab.errors import DistlabError
from distlab.recipe import OPTIMIZER_STATE_BYTES, ModelSpec, adam_state_key


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes one rank holds; ``static`` is everything that does not scale with the batch."""

    strategy: str
    world_size: int
    params: int
    grads: int
    optimizer: int
    activations: int

    @property
    def static(self) -> int:
        return self.params + self.grads + self.optimizer

    @property
    def total(self) -> int:
        return self.static + self.activations

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "static": self.static, "total": self.total}


def estimate_memory(spec: ModelSpec, *, strategy: str = "ddp", world_size: int = 1) -> MemoryBreakdown:
    """Per-rank bytes. DDP replicates everything; FSDP (full shard) divides the static part by world size.

    ``param_dtype_bytes`` is the width of frozen weights only: trainable parameters are always held in fp32
    (``distlab.placement.place`` keeps them there whatever ``models.<name>.dtype`` says, because AdamW steps at
    RL learning rates fall below half a bf16 ulp), so they, their gradients and Adam's moments count 4 + 4 + 8
    bytes, the textbook 16 bytes/param, and there is no separate master copy to count.
    """
    if strategy not in ("ddp", "fsdp"):
        raise DistlabError(f"unknown strategy {strategy!r}; use 'ddp' or 'fsdp'")
    if world_size < 1:
        raise DistlabError(f"world_size must be >= 1, got {world_size}")
    shard = world_size if strategy == "fsdp" else 1
    trainable_width = max(4, spec.param_dtype_bytes)  # fp64 stays fp64
    weights = (spec.params - spec.trainable) * spec.param_dtype_bytes + spec.trainable * trainable_width
    return MemoryBreakdown(
        strategy=strategy, world_size=world_size,
        params=math.ceil(weights / shard),
        grads=math.ceil(spec.trainable * trainable_width / shard),
        optimizer=math.ceil(spec.trainable * OPTIMIZER_STATE_BYTES[spec.optimizer] / shard),
        activations=spec.activation_bytes_per_example * spec.batch_per_device,
    )


def adjust_for_state_dtype(spec: ModelSpec, state_dtype: Any) -> ModelSpec:
    """A ModelSpec whose Adam state is counted at ``optim.state_dtype`` (bf16 and int8 moments are smaller)."""
    if getattr(spec, "optimizer", None) not in ("adam", "adamw"):
        return spec
    return dataclasses.replace(spec, optimizer=adam_state_key(state_dtype, spec.optimizer))


def recipe_specs(recipe: Any, cfg: Any) -> ModelSpec | list[ModelSpec] | None:
    """The recipe's memory model for ``cfg`` (one ModelSpec or a list, as the recipe gives it), optimizer
    state counted at ``optim.state_dtype``; None when the recipe has no memory model."""
    if recipe.model_spec is None:
        return None
    specs = recipe.model_spec(cfg)
    if isinstance(specs, list):
        return [adjust_for_state_dtype(s, cfg.optim.state_dtype) for s in specs]
    return adjust_for_state_dtype(specs, cfg.optim.state_dtype)
