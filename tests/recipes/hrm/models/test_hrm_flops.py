"""Analytic FLOPs per example agree with torch's FlopCounterMode on small models."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from distlab.recipes.hrm.flops import flops_per_example
from distlab.recipes.hrm.models import build_model

from .tiny import METADATA, make_batch, tiny_cfg


@pytest.mark.parametrize("name, over", [
    ("hrm", {"act": "q_learning"}),
    ("hrm", {"act": "fixed", "H_cycles": 3, "L_cycles": 1}),
    ("trm", {"act": "halt_only", "mlp_t": True, "puzzle_emb_len": 3}),
    ("transformer", {"act": "none", "num_layers": 3, "pos_encodings": "learned"}),
])
def test_flops_match_counter(name: str, over: dict) -> None:
    cfg = tiny_cfg(name, hidden_size=64, **over)
    model = build_model(cfg, METADATA).train()
    batch = make_batch(size=2)
    carry = model.initial_carry(batch)
    # The math backend decomposes attention into matmuls the counter sees on CPU.
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        _, loss, *_ = model(carry, batch)
        loss.backward()
    measured = counter.get_total_flops() / 2
    train = flops_per_example(cfg, METADATA, training=True)
    assert abs(train - measured) / measured < 0.1

    model.eval()
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(model.initial_carry(batch), batch)
    measured_eval = counter.get_total_flops() / 2
    assert abs(flops_per_example(cfg, METADATA, training=False) - measured_eval) / measured_eval < 0.1


def test_hrm_cycles_scale_forward_not_backward() -> None:
    base = tiny_cfg("hrm", act="fixed")
    short = flops_per_example(base, METADATA)
    long = flops_per_example({**base, "H_cycles": 4}, METADATA)
    fwd_short = flops_per_example(base, METADATA, training=False)
    fwd_long = flops_per_example({**base, "H_cycles": 4}, METADATA, training=False)
    assert long - short == fwd_long - fwd_short  # extra cycles run without gradient
