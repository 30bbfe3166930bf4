"""Adam-atan2 against its definition, HRM's lr schedule (the core's, warm-up from 0), optimizer assembly."""

from __future__ import annotations

import math

import pytest
import torch

from distlab.errors import DistlabError
from distlab.recipes.hrm.optim import SparseSignSGD, adam_atan2, build_optimizers
from distlab.training.lr_schedule import lr_factor, set_lr

from .tiny import make_batch, tiny_model


def test_adam_atan2_matches_definition_over_two_steps() -> None:
    lr, wd, (b1, b2), a, b = 0.1, 0.2, (0.9, 0.95), 1.27, 1.0
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = adam_atan2([p], lr=lr, weight_decay=wd, betas=(b1, b2), a=a, b=b)
    grads = [[0.5, -1.0], [-0.25, 3.0]]
    expected = [1.0, -2.0]
    m = [0.0, 0.0]
    v = [0.0, 0.0]
    for t, g in enumerate(grads, start=1):
        p.grad = torch.tensor(g)
        opt.step()
        for i in range(2):
            m[i] = b1 * m[i] + (1 - b1) * g[i]
            v[i] = b2 * v[i] + (1 - b2) * g[i] ** 2
            m_hat, v_hat = m[i] / (1 - b1 ** t), v[i] / (1 - b2 ** t)
            expected[i] = expected[i] * (1 - lr * wd) - lr * a * math.atan2(m_hat, b * math.sqrt(v_hat))
        assert p.detach().tolist() == pytest.approx(expected, abs=1e-6)


def test_adam_atan2_first_step_is_a_pi_over_4() -> None:
    """At step 1 m_hat = g and v_hat = g^2, so every coordinate moves by lr * a * pi / 4 (any |g|)."""
    p = torch.nn.Parameter(torch.tensor([1.0, 1.0, 1.0]))
    opt = adam_atan2([p], lr=0.1, weight_decay=0.0, a=1.27, b=1.0)
    p.grad = torch.tensor([1e-8, 3.0, -1e4])
    opt.step()
    step = 0.1 * 1.27 * math.pi / 4
    assert p.detach().tolist() == pytest.approx([1 - step, 1 - step, 1 + step], abs=1e-6)


def cosine_with_warmup(step: int, base_lr: float, warmup_steps: int, total_steps: int, min_ratio: float = 0.0) -> float:
    """HRM's schedule as the recipe asks the core for it."""
    return base_lr * lr_factor(step, warmup_steps, total_steps, "cosine", min_ratio, warmup_from_zero=True)


def test_cosine_with_warmup_values() -> None:
    base = 2e-3
    assert cosine_with_warmup(0, base, 10, 110) == 0.0
    assert cosine_with_warmup(5, base, 10, 110) == pytest.approx(base / 2)
    assert cosine_with_warmup(10, base, 10, 110) == pytest.approx(base)
    assert cosine_with_warmup(60, base, 10, 110, min_ratio=0.0) == pytest.approx(base / 2)
    assert cosine_with_warmup(60, base, 10, 110, min_ratio=0.5) == pytest.approx(base * 0.75)
    assert cosine_with_warmup(110, base, 10, 110, min_ratio=0.1) == pytest.approx(base * 0.1)
    assert cosine_with_warmup(500, base, 10, 110, min_ratio=0.1) == pytest.approx(base * 0.1)
    assert cosine_with_warmup(0, base, 0, 100) == pytest.approx(base)


def test_build_optimizers_gives_separate_puzzle_lr_and_decay() -> None:
    model = tiny_model("hrm")
    dense, sparse = build_optimizers(model, "adamw", lr=1e-3, weight_decay=0.05,
                                     puzzle_emb_lr=0.5, puzzle_emb_weight_decay=0.2)
    assert isinstance(sparse, SparseSignSGD)
    assert sparse.param_groups[0]["lr"] == 0.5 and sparse.param_groups[0]["weight_decay"] == 0.2
    assert dense.param_groups[0]["weight_decay"] == 0.05
    assert sum(p.numel() for p in dense.param_groups[0]["params"]) == \
        sum(p.numel() for p in model.parameters())
    lrs = set_lr([dense, sparse], step=5, warmup_steps=10, total_steps=100, warmup_from_zero=True)
    assert lrs == pytest.approx([5e-4, 0.25])

    batch = make_batch()
    _, loss, *_ = model(model.initial_carry(batch), batch)
    loss.backward()
    table = model.puzzle_emb.weights.clone()
    for opt in (dense, sparse):
        opt.step()
    changed = (model.puzzle_emb.weights != table).any(-1)
    assert changed.tolist() == [i in batch["puzzle_identifiers"].tolist() for i in range(len(table))]


def test_unknown_optimizer_is_a_user_error() -> None:
    with pytest.raises(DistlabError, match="adam_atan2"):
        build_optimizers(tiny_model("trm"), "adam_atan")
