"""EMA of weights: update rule, temporary swap for evaluation, checkpoint round trip."""

from __future__ import annotations

import pytest
import torch

from distlab.recipes.hrm.models.trm import EMA


def test_ema_update_apply_and_restore() -> None:
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 2.0]]))
    ema = EMA(model, decay=0.75, warmup=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[5.0, -2.0]]))
    ema.update(model)
    expected = [0.75 * 1.0 + 0.25 * 5.0, 0.75 * 2.0 + 0.25 * -2.0]  # [2.0, 1.0]
    with ema.apply_to(model):
        assert model.weight.detach().flatten().tolist() == pytest.approx(expected)
        assert model(torch.tensor([[1.0, 1.0]])).item() == pytest.approx(sum(expected))
    assert model.weight.detach().flatten().tolist() == [5.0, -2.0]


def test_ema_state_dict_round_trip_and_compiled_names() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 3))
    ema = EMA(model, decay=0.9)
    with torch.no_grad():
        model[0].weight.add_(1.0)
    ema.update(model)
    state = ema.state_dict()

    wrapped = torch.nn.Module()
    wrapped.module = torch.nn.Sequential(torch.nn.Linear(3, 3))  # DDP-style "module." prefix
    other = EMA(wrapped, decay=0.5)
    other.load_state_dict(state)
    assert (other.decay, other.warmup, other.updates) == (0.9, True, 1)
    assert other.rate() == ema.rate() == pytest.approx(2 / 11)
    torch.testing.assert_close(other.shadow["0.weight"], ema.shadow["0.weight"])


def test_ema_rejects_bad_decay() -> None:
    with pytest.raises(ValueError):
        EMA(torch.nn.Linear(1, 1), decay=1.0)


def test_ema_warmup_rate_and_what_it_fixes() -> None:
    """Rate min(decay, (1+n)/(10+n)): after 200 steps the average follows training, not the initial weights."""
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    warm, fixed = EMA(model, decay=0.999), EMA(model, decay=0.999, warmup=False)
    rates = []
    with torch.no_grad():
        model.weight.fill_(1.0)  # training moved the weight from 0 to 1 and it stays there
    for _ in range(200):
        rates.append(warm.rate())
        warm.update(model)
        fixed.update(model)
    assert rates[:3] == pytest.approx([1 / 10, 2 / 11, 3 / 12])
    assert warm.rate() == pytest.approx(201 / 210)
    assert fixed.shadow["weight"].item() == pytest.approx(1 - 0.999 ** 200)  # 0.18: mostly the initial 0
    # warm: the initial weight survives with weight prod_n rate_n = prod (1+n)/(10+n) = 9!*200!/209! < 1e-15
    assert warm.shadow["weight"].item() == pytest.approx(1.0, abs=1e-6)
    for _ in range(9000):
        warm.update(model)
    assert warm.rate() == 0.999


def test_ema_state_without_warmup_fields_keeps_the_fixed_rate() -> None:
    """A checkpoint written before the warm-up existed resumes at its fixed rate."""
    model = torch.nn.Linear(2, 2)
    old_state = {"decay": 0.99, "shadow": EMA(model, 0.99).state_dict()["shadow"]}
    ema = EMA(model, 0.999)
    ema.load_state_dict(old_state)
    assert (ema.warmup, ema.rate()) == (False, 0.99)
