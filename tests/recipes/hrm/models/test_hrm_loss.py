"""Stablemax / softmax cross-entropy against hand computation; per-sequence normalisation; metrics."""

from __future__ import annotations

import math

import torch

from distlab.recipes.hrm.models.loss import softmax_cross_entropy, stablemax_cross_entropy

from .tiny import make_batch, tiny_model


def _s(x: float) -> float:
    return x + 1 if x >= 0 else 1 / (1 - x)


def test_stablemax_matches_hand_computation() -> None:
    logits = torch.tensor([[[1.0, -2.0, 0.0], [3.0, 0.5, -0.25]]], dtype=torch.bfloat16)
    labels = torch.tensor([[0, 2]])
    loss = stablemax_cross_entropy(logits, labels)
    assert loss.dtype == torch.float64
    for pos, row in enumerate(logits[0].double().tolist()):
        total = sum(_s(v) for v in row)
        expected = -math.log(_s(row[labels[0, pos]]) / total)
        assert abs(loss[0, pos].item() - expected) < 1e-12
    assert abs(loss[0, 0].item() - (-math.log(2 / (2 + 1 / 3 + 1)))) < 1e-12


def test_ignored_tokens_cost_nothing_and_gradients_stay_finite() -> None:
    logits = torch.tensor([[[1.0, 1.0, -1.0], [0.0, 2.0, 1.0]]], requires_grad=True)
    labels = torch.tensor([[1, -100]])
    for fn in (stablemax_cross_entropy, softmax_cross_entropy):
        loss = fn(logits, labels)
        assert loss[0, 1].item() == 0.0
        (grad,) = torch.autograd.grad(loss.sum(), logits)
        assert torch.isfinite(grad).all() and grad[0, 1].abs().sum() == 0


def test_softmax_matches_hand_computation() -> None:
    logits = torch.tensor([[[2.0, 0.0, -1.0]]])
    expected = -(2.0 - math.log(math.exp(2) + 1 + math.exp(-1)))
    assert abs(softmax_cross_entropy(logits, torch.tensor([[0]])).item() - expected) < 1e-6


def test_loss_head_normalises_per_sequence_and_sums_metrics() -> None:
    model = tiny_model("hrm", act="none", loss_type="softmax")
    batch = make_batch()
    batch["labels"][1, :10] = -100  # sequences have different numbers of valid tokens
    _, loss, metrics, out, _ = model(model.initial_carry(batch), batch)

    logits, labels = out["logits"].float(), batch["labels"]
    per_token = softmax_cross_entropy(logits, labels)
    valid = (labels != -100).sum(-1)
    expected = sum((per_token[i].sum() / valid[i]).item() for i in range(4))
    assert abs(loss.item() - expected) < 1e-4
    assert abs(metrics["lm_loss"].item() - expected) < 1e-4

    correct = (logits.argmax(-1) == labels) & (labels != -100)
    acc = sum((correct[i].sum() / valid[i]).item() for i in range(4))
    assert metrics["count"].item() == 4
    assert abs(metrics["accuracy"].item() - acc) < 1e-5
    assert metrics["exact_accuracy"].item() == sum(bool(correct[i].sum() == valid[i]) for i in range(4))
    torch.testing.assert_close(out["preds"], out["logits"].argmax(-1))


def test_q_halt_loss_targets_exact_correctness() -> None:
    model = tiny_model("trm", act="halt_only").train()
    batch = make_batch()
    _, loss, metrics, out, _ = model(model.initial_carry(batch), batch)
    q = out["q_halt_logits"]
    correct = ((out["preds"] == batch["labels"]) | (batch["labels"] == -100)).all(-1).float()
    expected = torch.nn.functional.binary_cross_entropy_with_logits(q, correct, reduction="sum")
    assert abs(metrics["q_halt_loss"].item() - expected.item()) < 1e-5
    assert abs(loss.item() - (metrics["lm_loss"] + 0.5 * metrics["q_halt_loss"]).item()) < 1e-4
    assert metrics["count"].item() == 0  # nothing halted after one of three segments
