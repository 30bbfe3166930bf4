"""The core's one lr schedule reproduces the schedules the recipes used to carry (HRM, toy, GRPO/SCoRe)."""

from __future__ import annotations

import math

import pytest
import torch

from distlab.errors import DistlabError
from distlab.training.lr_schedule import lr_factor, set_lr


# -- the recipes' former formulas, verbatim: the references the shared schedule must reproduce --------------
def hrm_cosine_with_warmup(step, base_lr, warmup_steps, total_steps, min_ratio=0.0):
    if step < warmup_steps:
        return base_lr * step / max(1, warmup_steps)
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return base_lr * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def toy_lr_at(step, lr, warmup_steps, steps):
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    frac = (step - warmup_steps) / max(1, steps - warmup_steps)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def grpo_lr(step, lr, warmup_steps):
    return lr * min(1.0, (step + 1) / warmup_steps)


def _set_lr(base, step, warmup, total, min_ratio, **kw):
    """What a recipe's step does: one optimizer, its lr set from the group's base lr."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base)
    return set_lr([opt], step, warmup, total, "cosine", min_ratio, **kw)[0]


HRM_CASES = [(1e-4, 2000, 20000, 0.0), (7e-5, 0, 100, 0.0), (1e-4, 10, 110, 0.1), (3e-4, 5, 7, 0.5), (1e-2, 3, 3, 0.0)]


@pytest.mark.parametrize("base, warmup, total, min_ratio", HRM_CASES)
def test_reproduces_hrm_cosine_bit_for_bit(base, warmup, total, min_ratio):
    for step in list(range(0, min(total, 2500) + 50)) + [total, 10 * total]:
        old = hrm_cosine_with_warmup(step, base, warmup, total, min_ratio)
        assert _set_lr(base, step, warmup, total, min_ratio, warmup_from_zero=True) == old, step
        assert base * lr_factor(step, warmup, total, "cosine", min_ratio, warmup_from_zero=True) == \
            pytest.approx(old, rel=1e-15, abs=0)


@pytest.mark.parametrize("lr, warmup, steps", [(3e-3, 5, 40), (1e-3, 0, 12), (3e-3, 5, 5), (2e-3, 13, 100), (1e-3, 7, 3)])
def test_reproduces_toy_schedule_bit_for_bit(lr, warmup, steps):
    for step in range(steps + 10):
        assert _set_lr(lr, step, warmup, steps, 0.1) == toy_lr_at(step, lr, warmup, steps), step


@pytest.mark.parametrize("lr, warmup", [(1e-6, 10), (3e-3, 1), (5e-5, 7)])
def test_matches_grpo_warmup_exactly(lr, warmup):
    for step in range(60):
        assert lr * lr_factor(step, warmup, 60, "constant") == grpo_lr(step, lr, warmup)


def test_linear_decay_reaches_min_ratio_at_total():
    assert lr_factor(0, 0, 10, "linear", 0.2) == 1.0
    assert lr_factor(5, 0, 10, "linear", 0.2) == pytest.approx(0.6)
    assert lr_factor(10, 0, 10, "linear", 0.2) == pytest.approx(0.2)
    assert lr_factor(99, 0, 10, "linear", 0.2) == pytest.approx(0.2)
    assert lr_factor(1, 4, 10, "linear") == 0.5  # warm-up first: (1 + 1) / 4


def test_unknown_shape_is_named():
    with pytest.raises(DistlabError, match="cosin.*did you mean 'cosine'"):
        lr_factor(0, 0, 10, "cosin")


def test_set_lr_keeps_each_groups_own_base():
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    opt = torch.optim.SGD([{"params": a.parameters(), "lr": 1.0}, {"params": b.parameters(), "lr": 0.1}])
    assert set_lr([opt], 0, 4, 10, "constant") == [0.25, 0.025]
    assert set_lr([opt], 3, 4, 10, "constant") == [1.0, 0.1]  # from base_lr, not from the lowered lr
    assert [g["base_lr"] for g in opt.param_groups] == [1.0, 0.1]
    opt.param_groups[0]["base_lr"] = 2.0  # a recipe re-deriving its lr (scale.lr) sets base_lr itself
    assert set_lr([opt], 10, 4, 10, "cosine", 0.5)[0] == pytest.approx(1.0)
