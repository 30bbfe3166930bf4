"""ACT carry: halted slots take fresh data and state, the others keep theirs; halting rules."""

from __future__ import annotations

import torch

from .tiny import make_batch, tiny_model


def test_halted_slots_take_new_data_others_continue() -> None:
    model = tiny_model("hrm", act="fixed", halt_max_steps=4).train()
    first, second = make_batch(seed=1), make_batch(seed=2)

    with torch.no_grad():
        ref = model.initial_carry(first)
        ref, *_ = model(ref, first)
        _, _, _, ref_out, _ = model(ref, first)  # rows keep going on `first`: segment 2
        fresh = model.initial_carry(second)
        _, _, _, fresh_out, _ = model(fresh, second)  # rows restart on `second`: segment 1

        carry = model.initial_carry(first)
        carry, *_ = model(carry, first)
        assert carry.steps.tolist() == [1, 1, 1, 1] and not carry.halted.any()
        carry.halted = torch.tensor([True, False, True, False])
        carry, _, _, out, _ = model(carry, second)

    keep, fresh_rows = [1, 3], [0, 2]
    assert carry.steps.tolist() == [1, 2, 1, 2]
    for key in first:
        torch.testing.assert_close(carry.current_data[key][keep], first[key][keep])
        torch.testing.assert_close(carry.current_data[key][fresh_rows], second[key][fresh_rows])
    torch.testing.assert_close(out["logits"][keep], ref_out["logits"][keep])
    torch.testing.assert_close(out["logits"][fresh_rows], fresh_out["logits"][fresh_rows])


def test_fixed_mode_halts_exactly_at_max_steps() -> None:
    model = tiny_model("trm", act="fixed", halt_max_steps=3).train()
    batch = make_batch()
    carry = model.initial_carry(batch)
    halted = []
    for _ in range(6):
        carry, *_, all_halted = model(carry, batch)
        halted.append(bool(all_halted))
    assert halted == [False, False, True, False, False, True]


def _force_q(model: torch.nn.Module, halt: float, cont: float) -> None:
    with torch.no_grad():
        model.model.inner.q_head.bias.copy_(torch.tensor([halt, cont]))


def test_learned_halting_in_training_and_max_steps_in_eval() -> None:
    model = tiny_model("hrm", act="q_learning", halt_max_steps=5)
    _force_q(model, halt=5.0, cont=-5.0)
    batch = make_batch()
    carry, *_, all_halted = model.train()(model.initial_carry(batch), batch)
    assert bool(all_halted) and carry.steps.tolist() == [1] * 4

    model.eval()
    carry = model.initial_carry(batch)
    with torch.no_grad():
        for step in range(1, 6):
            carry, _, metrics, outputs, all_halted = model(carry, batch)
            assert bool(all_halted) == (step == 5)
            assert "target_q_continue" not in outputs
    assert metrics["count"].item() == 4 and metrics["steps"].item() == 4 * 5


def test_halt_only_uses_sign_of_q_halt() -> None:
    model = tiny_model("trm", act="halt_only", halt_max_steps=5).train()
    _force_q(model, halt=0.5, cont=9.0)  # q_continue is ignored in halt_only
    batch = make_batch()
    _, *_, all_halted = model(model.initial_carry(batch), batch)
    assert bool(all_halted)
    _force_q(model, halt=-0.5, cont=-9.0)
    _, *_, all_halted = model(model.initial_carry(batch), batch)
    assert not bool(all_halted)


def test_exploration_forces_at_least_two_steps() -> None:
    model = tiny_model("hrm", act="q_learning", halt_max_steps=4, halt_exploration_prob=1.0).train()
    _force_q(model, halt=5.0, cont=-5.0)
    batch = make_batch(size=16)
    carry = model.initial_carry(batch)
    halting_steps: list[int] = []
    for _ in range(8):
        carry, *_ = model(carry, batch)
        halting_steps += carry.steps[carry.halted].tolist()
    # q says "halt now" everywhere, so only the sampled minimum (2..max) delays halting
    assert halting_steps and min(halting_steps) >= 2 and max(halting_steps) <= 4
    assert len(set(halting_steps)) > 1


def test_q_continue_target_is_sigmoid_of_next_best_q() -> None:
    model = tiny_model("hrm", act="q_learning", halt_max_steps=2).train()
    _force_q(model, halt=-1.0, cont=2.0)  # q_head weights are zero: every q equals its bias
    batch = make_batch()
    carry, _, _, out, _ = model(model.initial_carry(batch), batch)
    torch.testing.assert_close(out["target_q_continue"], torch.sigmoid(torch.full((4,), 2.0)))
    _, _, metrics, out, _ = model(carry, batch)  # last step: target is the next q_halt alone
    torch.testing.assert_close(out["target_q_continue"], torch.sigmoid(torch.full((4,), -1.0)))
    assert metrics["q_continue_loss"].item() > 0


def test_none_mode_is_single_segment() -> None:
    model = tiny_model("transformer", act="none", halt_max_steps=8)
    batch = make_batch()
    for mode in (model.train, model.eval):
        mode()
        carry, *_, all_halted = model(model.initial_carry(batch), batch)
        assert bool(all_halted) and carry.steps.tolist() == [1] * 4
