"""What a skipped step's inf/NaN gradient came from, written down on the run's first skip.

The LM update skips a step whose gradient norm is inf/NaN in every precision (:func:`.update.policy_update`): the
weights stay finite and the run goes on, so the cause is gone by the time anyone reads the log (the review of
issue 47 found 2 such steps in the Qwen GRPO control arm and 1 in each guided SCoRe arm, with finite losses and
KL). On the run's first skip this module keeps the evidence: it runs every micro-batch's backward again on its own
(the step's gradients were summed, so their sum cannot say which micro-batch overflowed) and writes each
micro-batch's token ids, masks, per-token log-probs, the reference's log-probs and the KL, with which of them
overflowed alone, to ``<run>/nonfinite_<model>_rank<r>.pt``: enough to replay the tokens without the run.
The cost, one more forward and backward per micro-batch, is paid once per run.

Every rank runs every micro-batch's replay and record (the same forwards in the same order), so the collectives of
a wrapped model (FSDP2's all-gathers) stay matched; gradients are synchronised as in training, so with several
ranks the offending micro-batch index is the same on all of them and each rank's file shows its own tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from distlab.atomic import atomic_path
from distlab.recipes.lm.pg.logprobs import logprobs
from distlab.recipes.lm.pg.loss import kl_penalty

Record = Callable[[int], dict[str, torch.Tensor | None]]
MicroLoss = Callable[[int], tuple[torch.Tensor, dict[str, torch.Tensor]]]


@dataclass(frozen=True)
class SkipProbe:
    """What :func:`.update.policy_update` needs to write a skipped step down: the run directory, the step, this
    rank, and ``record(m)``, micro-batch ``m``'s tensors (see :func:`micro_batch_record`)."""

    run_dir: Path
    step: int
    rank: int
    record: Record


def dump_path(run_dir: Path, name: str, rank: int) -> Path:
    return Path(run_dir) / f"nonfinite_{name}_rank{rank}.pt"


def nonfinite_params(model: nn.Module) -> list[str]:
    """Names of the parameters whose (local) gradient holds an inf or NaN."""
    names = []
    for pname, p in model.named_parameters():
        grad = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
        if grad is not None and not bool(torch.isfinite(grad).all()):
            names.append(pname)
    return names


def micro_batch_record(session: Any, model: nn.Module, ids: torch.Tensor, attn: torch.Tensor, mask: torch.Tensor,
                       ref: torch.Tensor | None, *, kl: str, chunk_tokens: int, temperature: float,
                       pack: bool = False) -> dict[str, torch.Tensor | None]:
    """One micro-batch as the update saw it, on the host: ids, attention and scored masks, the policy's per-token
    log-probs (recomputed under the same autocast; the skipped step left the weights as they were), the reference's
    and the per-token KL estimate (``kl``), 0 outside ``mask``."""
    with torch.no_grad(), session.autocast():
        logp = logprobs(model, ids, attn, mask, chunk_tokens=chunk_tokens, temperature=temperature, pack=pack)[0]
    ref = ref.to(logp.device) if ref is not None else None
    kl_tok = torch.where(mask.to(logp.device).bool(), kl_penalty(logp, ref, kl), 0.0) if ref is not None else None
    out = {"ids": ids, "attention_mask": attn, "scored_mask": mask, "logprobs": logp, "ref_logprobs": ref,
           "kl": kl_tok}
    return {k: v.detach().cpu() if v is not None else None for k, v in out.items()}


def replay_alone(session: Any, model: nn.Module, micro_batches: int, micro_loss: MicroLoss) -> list[bool]:
    """Each micro-batch's forward and backward again, from zero gradients: whether its own gradient is finite."""
    finite = []
    for m in range(micro_batches):
        model.zero_grad(set_to_none=True)
        with session.autocast():
            loss, _ = micro_loss(m)
        loss.backward()
        finite.append(not nonfinite_params(model))
    model.zero_grad(set_to_none=True)
    return finite


def dump_skipped_step(session: Any, probe: SkipProbe, name: str, model: nn.Module, micro_batches: int,
                      micro_loss: MicroLoss, loss_finite: list[bool], skipped_steps: int) -> Path:
    """Replay and record every micro-batch of the skipped step; write them atomically; return the file."""
    params = nonfinite_params(model)  # of the step's summed gradient, before the replay replaces it
    alone = replay_alone(session, model, micro_batches, micro_loss)
    offending = [m for m, ok in enumerate(alone) if not ok] or [m for m, ok in enumerate(loss_finite) if not ok]
    payload = {"model": name, "step": probe.step, "rank": probe.rank, "skipped_steps": skipped_steps,
               "loss_finite": loss_finite, "grad_finite_alone": alone, "offending": offending,
               "nonfinite_params": params, "micro_batches": [probe.record(m) for m in range(micro_batches)]}
    path = dump_path(probe.run_dir, name, probe.rank)
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)
    return path
