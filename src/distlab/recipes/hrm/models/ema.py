"""Exponential moving average of model weights (TRM evaluates the EMA weights).

Small recursive models trained on ~1k examples overfit and oscillate; averaging weights over
steps smooths that out at no training cost.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn


class EMA:
    """``shadow = decay * shadow + (1 - decay) * param`` for every trainable parameter, in float32."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"EMA decay must lie in [0, 1), got {decay}")
        self.decay = decay
        self.shadow = {name: p.detach().to(torch.float32).clone()
                       for name, p in _named_trainable(model)}

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Fold the current weights in; call after every optimizer step."""
        for name, p in _named_trainable(model):
            self.shadow[name].lerp_(p.detach().to(torch.float32), 1.0 - self.decay)

    @contextmanager
    def apply_to(self, model: nn.Module) -> Iterator[nn.Module]:
        """Temporarily load the averaged weights (e.g. for evaluation), restoring them on exit."""
        params = dict(_named_trainable(model))
        backup = {name: p.detach().clone() for name, p in params.items()}
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(self.shadow[name])
        try:
            yield model
        finally:
            with torch.no_grad():
                for name, p in params.items():
                    p.copy_(backup[name])

    def state_dict(self) -> dict[str, object]:
        return {"decay": self.decay, "shadow": {k: v.clone() for k, v in self.shadow.items()}}

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.decay = float(state["decay"])  # type: ignore[arg-type]
        shadow = state["shadow"]
        assert isinstance(shadow, dict)
        missing = set(self.shadow) - set(shadow)
        if missing:
            raise KeyError(f"EMA state lacks parameters: {sorted(missing)[:5]}")
        for name, value in shadow.items():
            self.shadow[name] = value.to(self.shadow[name].device, torch.float32).clone()


def _clean(name: str) -> str:
    # DDP and torch.compile wrappers prefix parameter names; strip them so either form matches.
    name = name.replace("_orig_mod.", "")
    return name[len("module."):] if name.startswith("module.") else name


def _named_trainable(model: nn.Module) -> Iterator[tuple[str, nn.Parameter]]:
    for name, p in model.named_parameters():
        if p.requires_grad:
            yield _clean(name), p
