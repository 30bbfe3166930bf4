"""Same math, proven: ``torch.compile`` (what ``dist.compile=true`` applies) trains HRM, TRM and the
transformer exactly like plain eager fp32, with ACT halting learned, over several deep-supervision steps.

Tolerance: per-step losses and every parameter after ``STEPS`` steps agree to ``RTOL``/``ATOL`` (fp32
kernels fused by Inductor round differently from eager; a real bug - a dropped term, a stale carry, a
wrong halting mask - moves them by orders of magnitude more). Halting decisions must agree exactly.
"""

from __future__ import annotations

import pytest
import torch

from distlab.recipes.hrm.optim import build_optimizers

from .tiny import make_batch, tiny_model

STEPS = 5
RTOL, ATOL = 1e-4, 1e-5
ARCHS = {
    "hrm": dict(act="q_learning"),
    "trm": dict(act="halt_only", mlp_t=True, pos_encodings="none", puzzle_emb_len=2),
    "transformer": dict(act="q_learning"),
}


def _undecided_q_head(model: torch.nn.Module) -> None:
    """HRM starts its Q head at "never halt early"; centre it on the first batch instead, so about half the
    sequences halt on the Q values' say and the halting path is what is compared."""
    q_head = next(m for n, m in model.named_modules() if n.endswith("q_head"))
    with torch.no_grad():
        q_head.weight.normal_(0.0, 0.5)
        q_head.bias.zero_()
        batch = make_batch(size=8, seed=0)
        _, out = model.model(model.initial_carry(batch), batch)
        # the cut goes in the widest gap among the middle rows, never through a row: a row at the boundary flips
        # with fp32 rounding (the median of 8 sits half a gap from two rows) and fails the exact halting check
        gaps = (out["q_halt_logits"] - out["q_continue_logits"]).sort().values
        i = max(range(2, 6), key=lambda k: (gaps[k + 1] - gaps[k]).item())
        q_head.bias[0] -= (gaps[i] + gaps[i + 1]) / 2


def _train(name: str, compiled: bool) -> tuple[list[float], list[torch.Tensor], dict[str, torch.Tensor]]:
    """``STEPS`` optimizer steps as the trainer takes them: the ACT carry persists, halted rows take new data."""
    torch.manual_seed(0)
    model = tiny_model(name, halt_exploration_prob=0.5, **ARCHS[name]).train()
    _undecided_q_head(model)
    opts = build_optimizers(model, "adam_atan2", lr=1e-3, weight_decay=0.1, puzzle_emb_lr=1e-2)
    step_fn = torch.compile(model) if compiled else model
    carry, losses, halted = None, [], []
    torch.manual_seed(1)  # same exploration draws on both paths (fallback_random makes Inductor use eager RNG)
    for step in range(STEPS):
        batch = make_batch(size=8, seed=step)
        carry = model.initial_carry(batch) if carry is None else carry
        carry, loss, _, _, _ = step_fn(carry, batch)
        (loss / 8).backward()
        for opt in opts:
            opt.step()
            opt.zero_grad(set_to_none=True)
        losses.append(loss.item() / 8)
        halted.append(carry.halted.clone())
    return losses, halted, {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_compiled_training_matches_eager_fp32(name: str) -> None:
    torch._dynamo.reset()
    with torch._inductor.config.patch(fallback_random=True):
        eager = _train(name, compiled=False)
        compiled = _train(name, compiled=True)
    assert eager[0][0] > 0 and len(set(eager[0])) == STEPS  # it trained: the loss moved every step
    halted = torch.stack(eager[1])
    early = halted[:2].sum().item()  # before halt_max_steps (3) only the Q head can halt a sequence
    assert 0 < early and not halted.all()  # halting is decided by the learned Q values, not only by the cap
    torch.testing.assert_close(torch.tensor(compiled[0]), torch.tensor(eager[0]), rtol=RTOL, atol=ATOL)
    assert all(torch.equal(a, b) for a, b in zip(compiled[1], eager[1]))
    assert compiled[2].keys() == eager[2].keys()
    for key in eager[2]:
        torch.testing.assert_close(compiled[2][key], eager[2][key], rtol=RTOL, atol=ATOL, msg=lambda m: f"{key}: {m}")
