"""A recipe's language models: loaded once, each put where its settings say, and gathered for generation."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from distlab.recipes.lm.config import ModelConfig
from distlab.recipes.lm.models.parts import decoder_layers
from distlab.recipes.lm.models.source import load_causal_lm
from distlab.training.placement import DTYPES, place
from distlab.training.wrap import unwrap


def load_placed(name: str, cfg: Any, session, seed: int, lora: bool = True) -> tuple[nn.Module, Any]:
    """``(placed model, tokenizer)`` for model ``name`` of the recipe config (its settings: ``cfg.models[name]``).

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
    placed = place(name, model, settings, session.rt, cfg.dist,
                   shard_modules=decoder_layers(model) if trainable else None)
    return placed, tok


@contextlib.contextmanager
def gathered(model: nn.Module) -> Iterator[None]:
    """FSDP2: all-gather the parameters once around generation, not once per decoded token, and free every unit's
    gathered copy at the end. FSDP2's ``unshard``/``reshard`` act on one unit, not its children: resharding the root
    alone left each block's full weights on the GPU after sampling (an offloaded 3B policy's 12 GiB) until that
    block's next forward."""
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
            m.reshard()


def samples_from_a_copy(trains: bool, narrow_dtype: bool, sharded: bool) -> bool:
    """Whether generation reads a second set of weights (:class:`SamplingCopy`): a model that trains (its trained
    weights fp32, LoRA adapters included) with a dtype narrower than fp32, unless FSDP2 shards it. The doctor's
    memory model asks the same question of a config."""
    return trains and narrow_dtype and not sharded


class SamplingCopy:
    """The weights generation reads: the trained model itself, or a copy in ``dtype`` refreshed after every step.

    Trained weights stay fp32 (``placement.keep_trained_weights_fp32``). Sampling from them would read twice the
    bytes per decode step of bf16 weights, and sampling under autocast mixes dtypes in the static KV cache. So
    when ``models.<name>.dtype`` is narrower than fp32 the sampler gets its own copy in that dtype, the width the
    model was sampled at before; :meth:`refresh` copies the trained weights in place (the compiled decode step's
    CUDA graph holds the copy's tensor addresses). FSDP2-sharded models are sampled from directly (gathered).

    Only what trains is copied: frozen parameters already in ``dtype`` (a LoRA model's whole base) are the same
    tensors in both modules, so under LoRA the copy costs the adapters' bytes, not a second base, and generation
    runs peft's forward (base output plus the adapters' low-rank term) with nothing merged.
    """

    def __init__(self, model: nn.Module, dtype: torch.dtype) -> None:
        self.source = unwrap(model)
        sharded = any(hasattr(m, "unshard") for m in model.modules())
        trains = any(p.requires_grad for p in self.source.parameters())  # a frozen model is in its own dtype
        if samples_from_a_copy(trains, dtype != torch.float32, sharded):
            # deepcopy's memo maps a parameter to itself: it is shared, not copied (and .to(dtype) leaves it as is)
            shared = {id(p): p for p in self.source.parameters() if not p.requires_grad and p.dtype == dtype}
            self.module = copy.deepcopy(self.source, shared).to(dtype).requires_grad_(False).eval()
        else:
            self.module = self.source

    @property
    def is_copy(self) -> bool:
        return self.module is not self.source

    @torch.no_grad()
    def refresh(self) -> None:
        """Copy the trained weights into the sampling copy (after an optimizer step, a restore or a warm-up)."""
        if self.is_copy:
            for dst, src in zip(self.module.parameters(), self.source.parameters()):
                if dst is not src:  # a shared frozen parameter is already the source's
                    dst.copy_(src)
