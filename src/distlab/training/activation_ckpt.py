"""Activation checkpointing (``dist.activation_checkpointing``) of the blocks a model declares.

Recomputing a block's forward in backward instead of keeping its activations trades about one extra
forward per block for activation memory that no longer grows with depth. The engine is PyTorch's own
``checkpoint_wrapper`` in its non-reentrant form, the one that composes with DDP, FSDP2 (applied
*before* ``fully_shard``) and ``torch.compile`` (applied before compiling), as torchtitan does.

Which modules are blocks is the model's business, never the core's: any submodule may define
``checkpoint_blocks() -> list[nn.Module]`` (HRM/TRM declare their reasoning blocks that way); otherwise the
modules the recipe shards with FSDP2 (``shard_modules``: transformer and LLM decoder layers) are used.

* ``blocks``: every declared block is recomputed.
* ``selective``: every other declared block (0, 2, 4, ...) is recomputed; the others keep their
  activations. About half the memory saving for half the recompute cost.

Parameter names gain a ``_checkpoint_wrapped_module.`` segment while wrapped; ``state_dict`` and DCP strip
it, so checkpoints load with and without the option.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial

from torch import nn

from distlab.errors import DistlabError

log = logging.getLogger("distlab")

WRAPPED = "_checkpoint_wrapped_module."


def declared_blocks(model: nn.Module, shard_modules: Sequence[nn.Module] = ()) -> list[nn.Module]:
    """The model's checkpointable blocks in forward order: its ``checkpoint_blocks()``, else ``shard_modules``."""
    blocks: list[nn.Module] = []
    for module in model.modules():
        declare = getattr(module, "checkpoint_blocks", None)
        if callable(declare):
            blocks.extend(b for b in declare() if all(b is not x for x in blocks))
    return blocks or list(shard_modules)


def chosen_blocks(blocks: Sequence[nn.Module], mode: str) -> list[nn.Module]:
    """``blocks`` for mode ``blocks``, every other one (starting with the first) for ``selective``."""
    if mode == "none":
        return []
    if mode == "selective":
        return list(blocks[::2])
    return list(blocks)


def apply_activation_checkpointing(model: nn.Module, mode: str, shard_modules: Sequence[nn.Module] = (),
                                   name: str = "model", required: bool = True) -> dict[int, nn.Module]:
    """Wrap the chosen blocks of ``model`` in place; returns ``{id(block): wrapper}`` (empty for ``none``).

    Must run before DDP/FSDP2/compile see the model. A model that declares no blocks is a one-line
    error when ``required``; otherwise (a run's small side models, e.g. value heads) it is left as is.
    """
    if mode == "none":
        return {}
    targets = chosen_blocks(declared_blocks(model, shard_modules), mode)
    if not targets and not required:
        log.info("dist.activation_checkpointing=%s: %s declares no blocks; it keeps its activations", mode, name)
        return {}
    if not targets:
        raise DistlabError(f"dist.activation_checkpointing={mode} but {name} ({type(model).__name__}) declares no "
                           f"blocks to recompute (define checkpoint_blocks() on it); use "
                           f"dist.activation_checkpointing=none")
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl, apply_activation_checkpointing as apply, checkpoint_wrapper)

    ids = {id(b) for b in targets}
    apply(model, checkpoint_wrapper_fn=partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT),
          check_fn=lambda m: id(m) in ids)
    return {id(w._checkpoint_wrapped_module): w for w in model.modules()
            if id(getattr(w, "_checkpoint_wrapped_module", None)) in ids}


def plain_name(name: str) -> str:
    """A parameter name as it is without checkpoint wrappers (for name-keyed state such as an EMA)."""
    return name.replace(WRAPPED, "")
