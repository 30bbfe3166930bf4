"""Every architecture x ACT mode x dtype runs forward and backward with the right shapes."""

from __future__ import annotations

import pytest
import torch

from distlab.errors import DistlabError
from distlab.recipes.hrm.models import ArchConfig, build_model
from distlab.recipes.hrm.models.loss import METRIC_KEYS

from .tiny import METADATA, make_batch, tiny_model


CASES = [(name, act, "float32") for name in ("hrm", "trm", "transformer")
         for act in ("q_learning", "halt_only", "fixed", "none")]
CASES += [("hrm", "q_learning", "bfloat16"), ("trm", "halt_only", "bfloat16"), ("transformer", "fixed", "bfloat16")]


@pytest.mark.parametrize("name, act, dtype", CASES)
def test_forward_backward_shapes(name: str, act: str, dtype: str) -> None:
    model = tiny_model(name, act=act, forward_dtype=dtype, mlp_t=(name == "trm" and dtype == "float32"))
    batch = make_batch()
    carry = model.initial_carry(batch)
    carry, loss, metrics, outputs, all_halted = model(carry, batch)
    loss.backward()

    assert outputs["logits"].shape == (4, METADATA["seq_len"], METADATA["vocab_size"])
    assert outputs["logits"].dtype == getattr(torch, dtype)
    assert outputs["preds"].shape == (4, METADATA["seq_len"])
    assert outputs["q_halt_logits"].shape == (4,)
    assert set(metrics) == set(METRIC_KEYS)
    assert torch.isfinite(loss) and loss.item() > 0
    assert all(not z.requires_grad for z in carry.inner)
    assert bool(all_halted) == (act == "none")
    assert ("target_q_continue" in outputs) == (act == "q_learning")
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert any(g is not None and g.abs().sum() > 0 for g in grads)


def test_prefix_slots_follow_puzzle_emb_ndim() -> None:
    assert ArchConfig(hidden_size=32, puzzle_emb_ndim=40).prefix_len == 2
    assert ArchConfig(hidden_size=32, puzzle_emb_ndim=0).prefix_len == 0
    assert ArchConfig(hidden_size=32, puzzle_emb_ndim=32, puzzle_emb_len=4).prefix_len == 4
    model = tiny_model("hrm", puzzle_emb_ndim=40)
    carry = model.initial_carry(make_batch())
    assert carry.inner[0].shape == (4, METADATA["seq_len"] + 2, 32)


def test_defaults_are_hrm_sudoku() -> None:
    cfg = ArchConfig()
    assert (cfg.hidden_size, cfg.num_heads, cfg.expansion, cfg.H_layers, cfg.L_layers) == (512, 8, 4.0, 4, 4)
    assert (cfg.H_cycles, cfg.L_cycles, cfg.halt_max_steps, cfg.halt_exploration_prob) == (2, 2, 16, 0.1)
    assert (cfg.puzzle_emb_ndim, cfg.pos_encodings, cfg.forward_dtype, cfg.loss_type) == \
        (512, "rope", "bfloat16", "stablemax")


@pytest.mark.parametrize("bad, fragment", [
    ({"name": "hrn"}, "did you mean 'hrm'"),
    ({"hidden_sise": 64}, "did you mean 'hidden_size'"),
    ({"hidden_size": 30, "num_heads": 4}, "divisible"),
    ({"act": "qlearning"}, "q_learning"),
])
def test_bad_config_raises_one_line_error(bad: dict, fragment: str) -> None:
    with pytest.raises(DistlabError, match=fragment):
        build_model(bad, METADATA)


def test_missing_metadata_key_raises() -> None:
    with pytest.raises(DistlabError, match="seq_len"):
        build_model({"hidden_size": 32, "num_heads": 4}, {"vocab_size": 4, "num_puzzle_identifiers": 1})


def test_learned_positions_and_puzzle_emb_disabled() -> None:
    model = tiny_model("transformer", pos_encodings="learned", puzzle_emb_ndim=0)
    assert model.puzzle_emb is None
    batch = make_batch()
    _, loss, *_ = model(model.initial_carry(batch), batch)
    loss.backward()
    assert model.model.inner.embed_pos.weight.grad.abs().sum() > 0
