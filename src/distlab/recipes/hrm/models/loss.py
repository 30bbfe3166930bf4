"""Losses and metrics for one ACT segment.

The returned loss is a SUM over the batch (each sequence's token loss is normalised by its own
number of valid tokens): the trainer divides by the *global* batch size, so gradients do not
depend on how the batch is split across ranks. Metrics are sums too, plus ``count`` (halted
sequences with labels), so an all-reduce of them is exact.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .act import ACTCarry, ACTModel

IGNORE_LABEL_ID = -100
METRIC_KEYS = ("count", "accuracy", "exact_accuracy", "q_halt_accuracy", "steps",
               "lm_loss", "q_halt_loss", "q_continue_loss")


def _stablemax_s(x: torch.Tensor) -> torch.Tensor:
    """s(x) = x + 1 for x >= 0, 1 / (1 - x) otherwise: linear growth avoids softmax's overflow.

    The negative branch is evaluated on min(x, 0) so the unused branch never divides by zero
    (at x = 1 its inf derivative times where's zero gradient would give NaN).
    """
    return torch.where(x < 0, 1.0 / (1.0 - x.clamp(max=0)), x + 1.0)


def log_stablemax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    s = _stablemax_s(x)
    return torch.log(s / s.sum(dim=dim, keepdim=True))


def stablemax_cross_entropy(logits: torch.Tensor, labels: torch.Tensor,
                            ignore_index: int = IGNORE_LABEL_ID) -> torch.Tensor:
    """Per-token stablemax CE (0 at ignored tokens), in float64 (MPS lacks it: float32 there)."""
    dtype = torch.float32 if logits.device.type == "mps" else torch.float64
    logp = log_stablemax(logits.to(dtype), dim=-1)
    valid = labels != ignore_index
    picked = torch.gather(logp, -1, torch.where(valid, labels, 0).long().unsqueeze(-1)).squeeze(-1)
    return -torch.where(valid, picked, 0)


def softmax_cross_entropy(logits: torch.Tensor, labels: torch.Tensor,
                          ignore_index: int = IGNORE_LABEL_ID) -> torch.Tensor:
    """Per-token softmax CE in float32 (0 at ignored tokens)."""
    flat = F.cross_entropy(logits.to(torch.float32).reshape(-1, logits.shape[-1]), labels.long().reshape(-1),
                           ignore_index=ignore_index, reduction="none")
    return flat.view(labels.shape)


LOSSES = {"stablemax": stablemax_cross_entropy, "softmax": softmax_cross_entropy}


class ACTLossHead(nn.Module):
    """``carry, loss, metrics, outputs, all_halted = head(carry, batch)``."""

    def __init__(self, model: ACTModel, loss_kind: str) -> None:
        super().__init__()
        self.model = model
        self.loss_kind = loss_kind
        self.loss_fn = LOSSES[loss_kind]

    @property
    def puzzle_emb(self) -> nn.Module | None:
        return self.model.puzzle_emb

    def initial_carry(self, batch: dict[str, torch.Tensor]) -> ACTCarry:
        return self.model.initial_carry(batch)

    def forward(self, carry: ACTCarry, batch: dict[str, torch.Tensor]
                ) -> tuple[ACTCarry, torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor], torch.Tensor]:
        carry, out = self.model(carry, batch)
        labels = carry.current_data["labels"]
        logits = out["logits"]

        with torch.no_grad():
            mask = labels != IGNORE_LABEL_ID
            n_valid = mask.sum(-1)
            divisor = n_valid.clamp_min(1).unsqueeze(-1)
            preds = logits.argmax(-1)
            correct = mask & (preds == labels)
            seq_correct = correct.sum(-1) == n_valid
            counted = carry.halted & (n_valid > 0)
            metrics = {
                "count": counted.sum(),
                "accuracy": torch.where(counted, (correct.float() / divisor).sum(-1), 0).sum(),
                "exact_accuracy": (counted & seq_correct).sum(),
                "q_halt_accuracy": (counted & ((out["q_halt_logits"] >= 0) == seq_correct)).sum(),
                "steps": torch.where(counted, carry.steps, 0).sum(),
            }

        lm_loss = (self.loss_fn(logits, labels) / divisor).sum()
        zero = lm_loss.new_zeros(())
        q_halt_loss = zero
        if self.model.act in ("q_learning", "halt_only"):
            q_halt_loss = F.binary_cross_entropy_with_logits(
                out["q_halt_logits"], seq_correct.to(out["q_halt_logits"].dtype), reduction="sum")
        q_continue_loss = zero
        if "target_q_continue" in out:
            q_continue_loss = F.binary_cross_entropy_with_logits(
                out["q_continue_logits"], out["target_q_continue"], reduction="sum")
        loss = lm_loss + 0.5 * (q_halt_loss + q_continue_loss)

        metrics.update(lm_loss=lm_loss.detach(), q_halt_loss=q_halt_loss.detach(),
                       q_continue_loss=q_continue_loss.detach())
        metrics = {k: metrics[k].to(torch.float32) for k in METRIC_KEYS}
        outputs = {k: v.detach() for k, v in out.items()}
        outputs["preds"] = preds
        return carry, loss, metrics, outputs, carry.halted.all()


def run_segment(head: nn.Module, carry: ACTCarry, batch: dict[str, torch.Tensor], cuda_graphs: bool,
                keep_outputs: bool = True) -> tuple:
    """One call of ``head`` (possibly compiled and wrapped), safe to chain when its compile mode replays CUDA graphs.

    A replay writes its outputs where the previous replay wrote them, and every ACT call feeds the next one the
    carry it returned; so each call is marked as a new step and what outlives it is copied out: the carry always,
    the metrics and outputs when ``keep_outputs`` (evaluation keeps them; training sums the metrics into new
    tensors at once and drops the outputs, so its hot path copies the carry alone). The loss is consumed by the
    backward before the next call and is left in place.
    """
    if not cuda_graphs:
        return head(carry, batch)
    torch.compiler.cudagraph_mark_step_begin()
    carry, loss, metrics, outputs, all_halted = head(carry, batch)
    if not keep_outputs:
        return carry.clone(), loss, metrics, outputs, all_halted
    return (carry.clone(), loss, {k: v.clone() for k, v in metrics.items()},
            {k: v.clone() for k, v in outputs.items()}, all_halted.clone())
