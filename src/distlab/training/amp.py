"""fp16 mixed precision (``dist.precision=fp16``): dynamic loss scaling, in one object the Session owns.

fp16 has five exponent bits: gradients below about 6e-8 round to zero. The loss is therefore multiplied by
a large scale before backward and the gradients divided by it before clipping and the optimizer step. When
the scale is too large some gradient overflows to inf (or a NaN appears); that step is skipped (no optimizer
steps, weights and optimizer state unchanged) and the scale halved. After ``growth_interval`` steps in a row
without an overflow it doubles. This is ``torch.amp.GradScaler``; :class:`MixedPrecision` adds the parts a
training loop needs around it: one skip decision for all the optimizers of a step, the gradient norm taken
after unscaling, the count of skipped steps, and the state a checkpoint keeps (scale, growth tracker, count).

Every recipe's update goes through :meth:`MixedPrecision.backward` and :meth:`MixedPrecision.step`. With
``fp32`` and ``bf16`` (bf16 has fp32's exponent range and needs no scaling) the object is a pass-through: the
same ``backward``, clipping and ``optimizer.step()`` calls in the same order, so results are bitwise those of a
loop without it, and nothing is added to checkpoints or logs.

Distributed runs. Every rank must make the same skip decision, or the replicas diverge:

* DDP (and the LM/PPO recipes' own all-reduce): gradients are all-reduced before the check, so every rank
  sees the same infs.
* FSDP1 (``FullyShardedDataParallel``) needs ``torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler``,
  whose ``unscale_`` all-reduces ``found_inf``, because FSDP1's flat-parameter gradients are plain local shards.
  distlab does not use FSDP1.
* FSDP2 (``fully_shard``, ``dist.wrap=fsdp``): gradients are DTensors, and torch's DTensor dispatcher
  handles ``aten._amp_foreach_non_finite_check_and_unscale_`` (the kernel inside ``GradScaler.unscale_``)
  with ``found_inf_reduce_handler`` (``torch/distributed/tensor/_dispatch.py``), which max-reduces
  ``found_inf`` over every mesh dimension where the gradient is sharded. The plain ``torch.amp.GradScaler``
  therefore makes one decision on all ranks; no sharded scaler is needed. Checked in the source of the torch
  installed here (2.13); the handler is older than torch 2.11, which this code also supports.

CPU: ``torch.autocast("cpu", dtype=torch.float16)`` and ``torch.amp.GradScaler("cpu")`` both exist in the
supported torch versions (2.11-2.13), so fp16 runs and is tested without a GPU.

Optimizers whose gradients are not the ``.grad`` of their parameters (HRM's sparse puzzle-embedding
optimizer reads per-batch copies) are stepped or skipped together with the others, but their gradients are
neither unscaled nor checked: correct for that optimizer's sign descent, which no positive scale changes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from distlab.config import Precision
from distlab.training.wrap import clip_grad_norm

log = logging.getLogger("distlab")


class MixedPrecision:
    """Loss scaling for ``dist.precision``; a pass-through unless it is ``fp16``.

    ``backward(loss)`` scales and back-propagates; ``step(optimizers, model, max_norm)`` unscales, clips,
    steps every optimizer or none, updates the scale and returns the pre-clip gradient norm (None when the
    step was skipped or no norm was asked for). ``state_dict``/``load_state_dict`` make it checkpointable.
    """

    def __init__(self, precision: Precision | str, device: torch.device | str, *, init_scale: float = 2.0 ** 16,
                 growth_interval: int = 2000, growth_factor: float = 2.0, backoff_factor: float = 0.5) -> None:
        self.precision = Precision(precision)
        self.enabled = self.precision == Precision.fp16
        self.skipped_steps = 0  # over the whole run (checkpointed)
        self.last_skipped = False
        self._warned_small = False
        self.scaler = (torch.amp.GradScaler(torch.device(device).type, init_scale=init_scale,
                                            growth_factor=growth_factor, backoff_factor=backoff_factor,
                                            growth_interval=growth_interval)
                       if self.enabled else None)

    @classmethod
    def of(cls, session: Any) -> MixedPrecision:
        """The session's object, or a pass-through for a stand-in session that has none (unit tests)."""
        amp = getattr(session, "amp", None)
        return amp if isinstance(amp, MixedPrecision) else cls(Precision.fp32, "cpu")

    # -- the update -------------------------------------------------------------------------------
    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return self.scaler.scale(loss) if self.enabled else loss

    def backward(self, loss: torch.Tensor) -> None:
        self.scale(loss).backward()

    def step(self, optimizers: torch.optim.Optimizer | Iterable[torch.optim.Optimizer], model: nn.Module | None = None,
             max_norm: float | None = None, *, check_finite: bool = False) -> torch.Tensor | None:
        """One optimizer step of every optimizer in ``optimizers``, or of none when a gradient is inf/NaN.

        ``max_norm`` (with ``model``): clip ``model``'s gradients to this global norm (0 or less: measure
        only, as :func:`distlab.training.wrap.clip_grad_norm`) and return the pre-clip norm as a device tensor; None:
        no clipping, and None is returned. A skipped step returns None and counts in ``skipped_steps``.
        The caller zeroes the gradients afterwards, as before.

        ``check_finite`` (with a norm asked for) extends the skip to fp32 and bf16, where no loss scale explains
        an inf/NaN gradient: the weights stay finite instead of turning NaN for good (a clipped NaN norm scales
        every gradient by NaN). It reads the norm on the host, one synchronisation per step, so only loops that
        read the norm anyway ask for it (the LM recipes); they log the count as ``amp/skipped_steps``.
        """
        opts = [optimizers] if isinstance(optimizers, torch.optim.Optimizer) else list(optimizers)
        measure = model is not None and max_norm is not None
        if not self.enabled:
            norm = clip_grad_norm(model, max_norm) if measure else None
            self.last_skipped = bool(check_finite and norm is not None and not torch.isfinite(norm).item())
            if self.last_skipped:
                self.skipped_steps += 1
                return None
            for opt in opts:
                opt.step()
            return norm
        for opt in opts:
            self.scaler.unscale_(opt)
        norm = clip_grad_norm(model, max_norm) if measure else None
        # the scaler's own inf checks, recorded by unscale_ (private but unchanged since torch 1.6): one decision
        # for all optimizers, where GradScaler.step would decide per optimizer. Read before update(), which
        # sums them in place.
        found = [v for opt in opts
                 for v in self.scaler._per_optimizer_states[id(opt)]["found_inf_per_device"].values()]
        if not found:  # no parameter had a gradient: nothing to check, nothing to scale
            for opt in opts:
                opt.step()
            self.scaler.update(new_scale=self.scaler.get_scale())  # clears the per-optimizer record, scale as it is
            self.last_skipped = False
            return norm
        device = found[0].device
        skip = bool(torch.stack([v.to(device) for v in found]).sum().item())
        if not skip:
            for opt in opts:
                opt.step()
        self.scaler.update()
        self.last_skipped = skip
        if skip:
            self.skipped_steps += 1
            scale = self.scaler.get_scale()
            log.debug("fp16: inf/NaN gradients, step skipped; loss scale now %g", scale)
            if scale < 1.0 and not self._warned_small:
                self._warned_small = True
                log.warning("fp16 loss scale fell to %g after %d skipped steps: the loss or its gradients are inf/NaN "
                            "at any scale, which fp16 cannot fix (try dist.precision=bf16 or fp32)", scale,
                            self.skipped_steps)
        return None if skip else norm

    # -- what the log and the checkpoint hold ------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """``amp/scale`` and ``amp/skipped_steps`` with fp16; otherwise ``amp/skipped_steps`` once a step was skipped
        for a non-finite gradient (``check_finite``), and nothing before (log rows stay as they were)."""
        if not self.enabled:
            return {"amp/skipped_steps": self.skipped_steps} if self.skipped_steps else {}
        return {"amp/scale": float(self.scaler.get_scale()), "amp/skipped_steps": self.skipped_steps}

    def state_dict(self) -> dict[str, Any]:
        if not self.enabled:
            return {}
        sd = self.scaler.state_dict()
        return {"scale": float(sd["scale"]), "growth_tracker": int(sd["_growth_tracker"]),
                "skipped_steps": int(self.skipped_steps)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Scale, growth tracker and skip count; the growth and back-off settings stay the configured ones."""
        if not self.enabled or not state:
            return
        sd = self.scaler.state_dict()
        sd.update(scale=float(state["scale"]), _growth_tracker=int(state["growth_tracker"]))
        self.scaler.load_state_dict(sd)
        self.skipped_steps = int(state.get("skipped_steps", 0))
