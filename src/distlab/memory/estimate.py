"""Per-device memory arithmetic: weights, gradients, optimizer state and activations of a recipe's models.

Two readers need the same numbers: ``distlab doctor`` (will it fit, and what to change) and the
one-line out-of-memory report of a failed run (:mod:`distlab.memory.oom`). They live here, below both, so
the run-time core never reaches up into the doctor's command code.

The estimate is deliberately simple arithmetic a person can redo by hand. It is a lower bound (no
allocator fragmentation, no DDP bucket copies, no FSDP all-gather buffers).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator
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
    (``distlab.training.placement.place`` keeps them there whatever ``models.<name>.dtype`` says, because AdamW steps at
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
    state counted at ``optim.state_dtype``; None when the recipe has no memory model.

    A recipe may build its model to count the parameters; its initialisers are skipped then (see
    :func:`initialisers_skipped`), since ``train`` asks this before every launch and HRM's take seconds. A model
    too large to allocate here (the runs this check exists to refuse) is counted on the meta device instead (its
    first use costs torch's decompositions, ~2 s), and one whose construction needs its initial values is built
    as it is."""
    if recipe.model_spec is None:
        return None
    specs = _counted(recipe, cfg)
    if isinstance(specs, list):
        return [adjust_for_state_dtype(s, cfg.optim.state_dtype) for s in specs]
    return adjust_for_state_dtype(specs, cfg.optim.state_dtype)


def _counted(recipe: Any, cfg: Any) -> Any:
    import torch

    for device in ("cpu", "meta"):
        try:
            with torch.device(device), initialisers_skipped():
                return recipe.model_spec(cfg)
        except DistlabError:
            raise
        except Exception:  # noqa: BLE001, S112 (too large for the CPU, or needs values: the next way says)
            continue
    return recipe.model_spec(cfg)


# In-place tensor methods that change what a tensor is rather than the numbers in it: these still run
SHAPING = frozenset({"requires_grad_", "resize_", "resize_as_", "set_", "squeeze_", "unsqueeze_", "t_", "transpose_",
                     "swapdims_", "swapaxes_", "as_strided_", "detach_", "share_memory_", "rename_"})


@contextlib.contextmanager
def initialisers_skipped() -> Iterator[None]:
    """A context in which new parameters keep whatever memory they were given: ``torch.nn.init``'s initialisers
    and in-place tensor arithmetic (which every initialiser ends in) return their tensor untouched, and random
    factories become ``empty``. Counting a model's parameters then costs its allocation (untouched pages, on the
    CPU) instead of its initialisation, and no arithmetic runs on uninitialised memory (denormals, and the
    rejection loop of a truncated normal: minutes for HRM). Nothing built inside it may be trained."""
    import torch
    from torch.overrides import TorchFunctionMode

    random = {torch.randn: torch.empty, torch.rand: torch.empty, torch.randn_like: torch.empty_like,
              torch.rand_like: torch.empty_like}

    class SkipInit(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func in random:
                kwargs.pop("generator", None)
                return random[func](*args, **kwargs)
            name = getattr(func, "__name__", "")
            target = args[0] if args else kwargs.get("tensor")
            if name.endswith("_") and not name.endswith("__") and name not in SHAPING \
                    and isinstance(target, torch.Tensor):
                return target
            return func(*args, **kwargs)

    def untouched(tensor: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: ARG001
        return tensor

    init = torch.nn.init
    saved = {name: fn for name, fn in vars(init).items()
             if name.endswith("_") and not name.startswith("_") and callable(fn)}
    try:
        for name in saved:
            setattr(init, name, untouched)
        with SkipInit():
            yield
    finally:
        for name, fn in saved.items():
            setattr(init, name, fn)
