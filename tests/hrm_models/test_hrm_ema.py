"""EMA of weights: update rule, temporary swap for evaluation, checkpoint round trip."""

from __future__ import annotations

import pytest
import torch

from distlab.recipes.hrm.models.trm import EMA


def test_ema_update_apply_and_restore() -> None:
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 2.0]]))
    ema = EMA(model, decay=0.75)
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
    assert other.decay == 0.9
    torch.testing.assert_close(other.shadow["0.weight"], ema.shadow["0.weight"])


def test_ema_rejects_bad_decay() -> None:
    with pytest.raises(ValueError):
        EMA(torch.nn.Linear(1, 1), decay=1.0)
