"""HRM differentiates only its last L and H update; TRM only its last recursion."""

from __future__ import annotations

import copy

import torch

from .tiny import make_batch, tiny_model


def _record_grad_flags(module: torch.nn.Module, log: list[bool]) -> None:
    module.register_forward_hook(lambda _m, _i, out: log.append(out.requires_grad))


def test_hrm_one_step_gradient() -> None:
    model = tiny_model("hrm", H_cycles=3, L_cycles=2).train()
    inner = model.model.inner
    l_calls: list[bool] = []
    h_calls: list[bool] = []
    _record_grad_flags(inner.L_level, l_calls)
    _record_grad_flags(inner.H_level, h_calls)
    batch = make_batch()
    _, loss, *_ = model(model.initial_carry(batch), batch)
    assert l_calls == [False] * 5 + [True]
    assert h_calls == [False] * 2 + [True]
    loss.backward()
    for level in (inner.H_level, inner.L_level):
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in level.parameters())


def test_hrm_gradient_equals_last_step_only() -> None:
    """Gradient through the model equals the gradient of one L and one H step from the no-grad state."""
    model = tiny_model("hrm", H_cycles=2, L_cycles=2, act="fixed", puzzle_emb_ndim=0).train()
    inner = model.model.inner
    batch = make_batch()
    carry = inner.reset_carry(torch.ones(4, dtype=torch.bool), inner.empty_carry(4, torch.device("cpu")))
    _, logits, _, _ = inner(carry, batch)
    logits.square().sum().backward()
    auto = inner.L_level.layers[0].mlp.down_proj.weight.grad.clone()
    inner.zero_grad()

    x = inner.input_embeddings(batch["inputs"], batch["puzzle_identifiers"])
    z_H, z_L = (z.clone() for z in carry)
    with torch.no_grad():
        z_L = inner.L_level(z_L, z_H + x, inner.cos_sin())
        z_L = inner.L_level(z_L, z_H + x, inner.cos_sin())
        z_H = inner.H_level(z_H, z_L, inner.cos_sin())
        z_L = inner.L_level(z_L, z_H + x, inner.cos_sin())
    z_L = inner.L_level(z_L.detach(), z_H.detach() + x, inner.cos_sin())
    z_H = inner.H_level(z_H.detach(), z_L, inner.cos_sin())
    inner.lm_head(z_H)[:, inner.prefix_len:].square().sum().backward()
    torch.testing.assert_close(auto, inner.L_level.layers[0].mlp.down_proj.weight.grad)


def test_trm_backprops_through_last_recursion_only() -> None:
    model = tiny_model("trm", H_cycles=3, L_cycles=4).train()
    calls: list[bool] = []
    _record_grad_flags(model.model.inner.net, calls)
    batch = make_batch()
    carry, loss, *_ = model(model.initial_carry(batch), batch)
    assert calls == [False] * 10 + [True] * 5
    assert not any(z.requires_grad for z in carry.inner)


def _carry_tensors(carry) -> list[torch.Tensor]:
    """The recurrent state (a tuple of tensors), the step counters and the batch the carry holds."""
    return [*carry.inner, carry.steps, carry.halted, *carry.current_data.values()]


def test_transformer_carry_detached_between_segments() -> None:
    """Segment 2's gradient must not reach back into segment 1: the carry it receives holds no graph.

    Checked twice: every carried tensor is cut from the graph, and the gradient of segment 2's loss equals
    the gradient from a copy of that carry that never saw segment 1 (a leaked graph would add to it).
    """
    model = tiny_model("transformer").train()
    batch = make_batch()
    carry, loss1, *_ = model(model.initial_carry(batch), batch)
    tensors = _carry_tensors(carry)
    assert tensors and all(t.grad_fn is None and not t.requires_grad for t in tensors)
    fresh = copy.deepcopy(carry)

    _, loss2, *_ = model(carry, batch)
    loss2.backward()
    through_carry = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert through_carry and any(g.abs().sum() > 0 for g in through_carry.values())
    model.zero_grad(set_to_none=True)

    _, loss2_fresh, *_ = model(fresh, batch)
    torch.testing.assert_close(loss2_fresh, loss2.detach())
    loss2_fresh.backward()
    for name, grad in through_carry.items():
        torch.testing.assert_close(grad, dict(model.named_parameters())[name].grad, msg=name)
