"""One policy-gradient update on a step's rollouts, shared by every LM recipe.

The recipe supplies the loss of one micro-batch; this module owns the rest of the step: log-probs of
the policy that sampled the rollouts and of the frozen reference (once, before any update, under the
same autocast as the trained pass so that the first ratio is exactly 1 in value), then
``iterations`` optimizer steps, each accumulating every micro-batch's gradient with DDP's all-reduce
only on the last, then clipping and stepping (through the session's :class:`distlab.training.amp.MixedPrecision`:
with ``dist.precision=fp16`` the loss is scaled and a step with inf/NaN gradients skipped). Losses are
normalised by global counts the recipe agreed beforehand, so nothing here divides by the number of
micro-batches or ranks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from torch import nn

from distlab.recipes.lm.pg.logprobs import logprobs
from distlab.recipes.lm.pg.nonfinite import SkipProbe, dump_skipped_step, nonfinite_params
from distlab.run.logs import mark_peak
from distlab.training.amp import MixedPrecision
from distlab.training.wrap import no_sync

log = logging.getLogger("distlab")

MicroLoss = Callable[[int], tuple[torch.Tensor, dict[str, torch.Tensor]]]


def frozen_logprobs(session, model: nn.Module | None, ids: torch.Tensor, attn: torch.Tensor, mask: torch.Tensor,
                    slices: list[slice], *, chunk_tokens: int, temperature: float, device: torch.device,
                    pack: bool = False) -> list[torch.Tensor | None]:
    """Per micro-batch, ``model``'s log-probs of the masked tokens on ``device`` (None for no model)."""
    if model is None:
        return [None] * len(slices)
    with torch.no_grad(), session.autocast():
        return [logprobs(model, ids[sl], attn[sl], mask[sl], chunk_tokens=chunk_tokens, temperature=temperature,
                         pack=pack)[0].to(device) for sl in slices]


def policy_update(session, model: nn.Module, opt: torch.optim.Optimizer, micro_batches: int, micro_loss: MicroLoss,
                  *, iterations: int = 1, max_grad_norm: float = 1.0, name: str = "policy",
                  marks: dict[str, float] | None = None, probe: SkipProbe | None = None
                  ) -> tuple[dict[str, float], float]:
    """``iterations`` optimizer steps over ``micro_batches`` micro-batches; returns (summed stats, last grad norm).

    ``micro_loss(m)`` runs the forward of micro-batch ``m`` and returns its loss share and its stats
    (sums); it runs under the session's autocast, and the backward follows here. A step whose gradient norm
    is inf/NaN is skipped in every precision (the weights stay as they were; warned, naming ``name``, and counted
    in ``amp/skipped_steps``); its norm comes back as NaN. On the run's first such skip (not fp16's loss-scale
    overflows, which the scale fixes) ``probe`` has the step's micro-batches replayed and written down
    (:mod:`.nonfinite`). ``marks`` gets the memory peak before the first optimizer step
    (``peak_gib_after/backward``), which tells the forward and backward from the step (:func:`distlab.run.logs.mark_peak`).
    """
    # summed where they are (reading a GPU tensor waits for the GPU): the host reads them once, after every step
    device_sums: dict[str, torch.Tensor | float] = {}
    gnorm = 0.0
    amp = MixedPrecision.of(session)
    for _ in range(iterations):
        finite = []  # per micro-batch, on the device: read only when the step turns out non-finite
        for m in range(micro_batches):
            with no_sync(model, m < micro_batches - 1), session.autocast():
                loss, stats = micro_loss(m)
            finite.append(torch.isfinite(loss.detach()).all())
            amp.backward(loss)
            for key, value in stats.items():
                value = value.detach() if isinstance(value, torch.Tensor) else value
                device_sums[key] = device_sums[key] + value if key in device_sums else value
        if marks is not None and "peak_gib_after/backward" not in marks:
            mark_peak(session.rt, "backward", marks)
        norm = amp.step(opt, model, max_grad_norm, check_finite=True)
        gnorm = float("nan") if norm is None else float(norm)  # NaN: the step was skipped (inf/NaN gradients)
        if norm is None and not amp.enabled:
            warn_skipped(session, name, model, micro_batches, micro_loss, finite, amp.skipped_steps, probe)
        opt.zero_grad(set_to_none=True)
    return {key: float(value) for key, value in device_sums.items()}, gnorm


def warn_skipped(session, name: str, model: nn.Module, micro_batches: int, micro_loss: MicroLoss,
                 finite: list[torch.Tensor], skipped_steps: int, probe: SkipProbe | None) -> None:
    """Warn of a skipped step with where its inf/NaN came from; the run's first also goes to a file (``probe``)."""
    origin = nonfinite_origin(model, finite)
    if probe is not None and skipped_steps == 1:
        loss_finite = torch.stack(finite).tolist() if finite else []
        path = dump_skipped_step(session, probe, name, model, micro_batches, micro_loss, loss_finite, skipped_steps)
        origin += f"; its micro-batches (ids, log-probs, reference, KL) are in {path}"
    log.warning("the %s update's gradient norm is inf/NaN: optimizer step skipped, weights unchanged "
                "(%d skipped so far); %s", name, skipped_steps, origin)


def nonfinite_origin(model: nn.Module, finite_losses: list[torch.Tensor], shown: int = 3) -> str:
    """Where a skipped step's inf/NaN came from: the micro-batches whose loss was already non-finite (else the
    backward overflowed) and the first parameters holding a non-finite gradient, the clue a rerun needs."""
    bad = [i for i, ok in enumerate(torch.stack(finite_losses).tolist()) if not ok] if finite_losses else []
    where = (f"loss non-finite in micro-batch(es) {bad} of {len(finite_losses)}" if bad
             else f"every micro-batch's loss finite ({len(finite_losses)}): the backward overflowed")
    names = nonfinite_params(model)
    shown_names = ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")
    return f"{where}; non-finite gradients in {len(names)} parameter(s) ({shown_names or 'none on this rank'})"
