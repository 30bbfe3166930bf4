"""Exponential moving average of model weights (TRM evaluates the EMA weights).

Small recursive models trained on ~1k examples overfit and oscillate; averaging weights over
steps smooths that out at no training cost.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from distlab.training.activation_ckpt import plain_name


class EMA:
    """``shadow = d * shadow + (1 - d) * param`` for every trainable parameter, in float32.

    With ``warmup`` the rate at update ``n`` is ``d = min(decay, (1 + n) / (10 + n))``: TRM's fixed 0.999
    keeps 82% of the *initial* weights in the average after 200 steps and 26% after 1,350, so evaluations
    of short runs (and early evaluations of long ones) measured an untrained model. From about 9,000
    updates on the rate is ``decay`` itself, so long runs end with the same average as without warm-up.
    """

    def __init__(self, model: nn.Module, decay: float, warmup: bool = True) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"EMA decay must lie in [0, 1), got {decay}")
        self.decay, self.warmup, self.updates = decay, warmup, 0
        self.shadow = {name: p.detach().to(torch.float32).clone()
                       for name, p in _named_trainable(model)}

    def rate(self) -> float:
        """The decay the next update uses."""
        if not self.warmup:
            return self.decay
        return min(self.decay, (1.0 + self.updates) / (10.0 + self.updates))

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Fold the current weights in; call after every optimizer step."""
        weight = 1.0 - self.rate()
        for name, p in _named_trainable(model):
            self.shadow[name].lerp_(p.detach().to(torch.float32), weight)
        self.updates += 1

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
        return {"decay": self.decay, "warmup": self.warmup, "updates": self.updates,
                "shadow": {k: v.clone() for k, v in self.shadow.items()}}

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.decay = float(state["decay"])  # type: ignore[arg-type]
        # checkpoints from before the warm-up existed ran at the fixed rate: keep them on it
        self.warmup = bool(state.get("warmup", False))
        self.updates = int(state.get("updates", 0))  # type: ignore[call-overload]
        shadow = state["shadow"]
        assert isinstance(shadow, dict)
        missing = set(self.shadow) - set(shadow)
        if missing:
            raise KeyError(f"EMA state lacks parameters: {sorted(missing)[:5]}")
        for name, value in shadow.items():
            self.shadow[name] = value.to(self.shadow[name].device, torch.float32).clone()


def _clean(name: str) -> str:
    # DDP, torch.compile and activation-checkpoint wrappers add to parameter names; strip them so either form matches.
    name = plain_name(name.replace("_orig_mod.", ""))
    return name[len("module."):] if name.startswith("module.") else name


def _named_trainable(model: nn.Module) -> Iterator[tuple[str, nn.Parameter]]:
    for name, p in model.named_parameters():
        if p.requires_grad:
            yield _clean(name), p
