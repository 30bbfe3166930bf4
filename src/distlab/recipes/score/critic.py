"""An ArCHer-style utterance-level critic (arXiv 2402.19446), kept small: MLP heads over pooled hidden states.

A state is the text so far and an action one whole turn. Its features are the mean of the policy's
final-layer hidden states over the state's tokens (for V) or over state and action (for Q), taken
without gradient from one forward pass over the finished episode: attention is causal, so the mean
over a prefix of the episode equals the mean the model would give that prefix alone.

Twin Q heads and twin V heads regress, head by head,

    Q_i(s, a) -> r + gamma (1 - done) V_target_i(s')      V_i(s) -> Q_target_i(s, a), a ~ pi

where the target critic follows the critic by ``target <- (1 - tau) target + tau critic`` after each
critic step; the policy's advantage is ``min(Q1, Q2)(s, a) - min(V1, V2)(s)``. Pairing head i with
target head i keeps the twins independent; the min is taken only where it guards against
over-estimation, in the advantage. The episode gives two transitions: (s0 = x, a1 = y1, rew1, s1) and
(s1 = x y1 hint instruction, a2 = y2, rew2, terminal).

A step's advantages come from the critic *before* it is fitted on that step's transitions
(:func:`score_then_fit`): a critic just regressed onto these very returns would score them with its own fit
error, shrinking every advantage towards 0 the better it fits (ArCHer likewise scores with a critic trained on
earlier data).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from distlab.recipes.lm.models.parts import position_ids_from_mask
from distlab.training.amp import MixedPrecision
from distlab.training.placement import compute_device, soft_update_
from distlab.training.wrap import unwrap


class TwinHead(nn.Module):
    """Two independent MLPs over the same features: ``[N, d] -> [N, 2]``."""

    def __init__(self, in_dim: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(in_dim, elementwise_affine=False)  # pooled states of any model have one scale
        self.heads = nn.ModuleList([nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                                                  nn.ReLU(), nn.Linear(hidden, 1)) for _ in range(2)])

    def forward(self, x: Tensor) -> Tensor:
        z = self.norm(x)
        return torch.cat([h(z) for h in self.heads], dim=-1)


def make_target(q: nn.Module, v: nn.Module) -> nn.ModuleDict:
    """The target critic: frozen copies of both Q and V heads (it is state, moved only by soft updates)."""
    import copy

    target = nn.ModuleDict({"q": copy.deepcopy(unwrap(q)), "v": copy.deepcopy(unwrap(v))})
    return target.requires_grad_(False)


def soft_update_target(target: nn.ModuleDict, q: nn.Module, v: nn.Module, tau: float) -> None:
    """``target <- (1 - tau) target + tau critic`` for Q and V (tau = 1 copies, tau = 0 leaves it alone)."""
    soft_update_(target["q"], unwrap(q), tau)
    soft_update_(target["v"], unwrap(v), tau)


@dataclass
class Transitions:
    """Features of the two transitions of N episodes, ``[N, d]`` each, and the turn rewards ``[N]``."""

    s0: Tensor
    s0a1: Tensor
    s1: Tensor
    s1a2: Tensor
    rew1: Tensor
    rew2: Tensor

    def __len__(self) -> int:
        return int(self.rew1.shape[0])


def td_targets(target: nn.ModuleDict, t: Transitions, gamma: float) -> tuple[Tensor, Tensor]:
    """``(q_target [2N, 2], v_target [2N, 2])`` in the order (turn 1 rows, turn 2 rows), no gradient."""
    dev = compute_device(target)
    with torch.no_grad():
        v_next = target["v"](t.s1.to(dev)).cpu()  # V_target(s1) for the turn-1 transition
        q_t = target["q"](torch.cat([t.s0a1, t.s1a2]).to(dev)).cpu()
    q_target = torch.cat([t.rew1[:, None] + gamma * v_next, t.rew2[:, None].expand(-1, 2)])  # turn 2 is terminal
    return q_target, q_t


def critic_losses(q: nn.Module, v: nn.Module, target: nn.ModuleDict, t: Transitions, gamma: float
                  ) -> tuple[Tensor, Tensor]:
    """Sums of squared TD errors over both heads and both transitions: ``(q_loss_sum, v_loss_sum)``."""
    q_target, v_target = td_targets(target, t, gamma)
    q_dev, v_dev = compute_device(q), compute_device(v)
    q_pred = q(torch.cat([t.s0a1, t.s1a2]).to(q_dev))
    v_pred = v(torch.cat([t.s0, t.s1]).to(v_dev))
    return ((q_pred - q_target.to(q_dev)) ** 2).sum(), ((v_pred - v_target.to(v_dev)) ** 2).sum()


def critic_step(q: nn.Module, v: nn.Module, target: nn.ModuleDict, opt_q: torch.optim.Optimizer,
                opt_v: torch.optim.Optimizer, t: Transitions, *, gamma: float, tau: float, global_rows: int,
                world_size: int = 1, amp: MixedPrecision | None = None) -> tuple[float, float]:
    """One gradient step of Q and V on the mean squared TD error over the step's rows, then the soft update.

    ``global_rows`` is the number of squared errors summed over all ranks (2 transitions x 2 heads x
    episodes); times ``world_size`` because DDP averages gradients. Returns the local loss sums.
    ``amp`` is the session's loss scaling (``dist.precision=fp16``: both steps or, on inf/NaN, neither; the
    soft update follows either way); None steps plainly.
    """
    amp = amp if amp is not None else MixedPrecision("fp32", "cpu")
    q_loss, v_loss = critic_losses(q, v, target, t, gamma)
    scale = world_size / max(global_rows, 1)
    amp.backward(q_loss * scale)
    amp.backward(v_loss * scale)
    amp.step((opt_q, opt_v))
    for opt in (opt_q, opt_v):
        opt.zero_grad(set_to_none=True)
    soft_update_target(target, q, v, tau)
    return float(q_loss.detach()), float(v_loss.detach())


def critic_advantages(q: nn.Module, v: nn.Module, t: Transitions) -> tuple[Tensor, Tensor]:
    """``A_k = min(Q1, Q2)(s, a_k) - min(V1, V2)(s)`` for turn 1 and turn 2, on the CPU."""
    with torch.no_grad():
        qs = unwrap(q)(torch.cat([t.s0a1, t.s1a2]).to(compute_device(q))).min(-1).values.cpu()
        vs = unwrap(v)(torch.cat([t.s0, t.s1]).to(compute_device(v))).min(-1).values.cpu()
    adv = qs - vs
    n = len(t)
    return adv[:n], adv[n:]


def score_then_fit(q: nn.Module, v: nn.Module, target: nn.ModuleDict, opt_q: torch.optim.Optimizer,
                   opt_v: torch.optim.Optimizer, t: Transitions, *, updates: int, gamma: float, tau: float,
                   global_rows: int, world_size: int = 1, amp: MixedPrecision | None = None
                   ) -> tuple[Tensor, Tensor, float, float]:
    """``(A1, A2, q_loss_sum, v_loss_sum)``: advantages from the critic as it stood, then ``updates`` TD steps.

    Scoring first keeps the batch that is scored out of the fit that scores it (the loss sums are the last
    step's, as :func:`critic_step` returns them).
    """
    if updates < 1:
        raise ValueError(f"critic_updates must be >= 1, got {updates}")
    a1, a2 = critic_advantages(q, v, t)
    q_sum = v_sum = 0.0
    for _ in range(updates):
        q_sum, v_sum = critic_step(q, v, target, opt_q, opt_v, t, gamma=gamma, tau=tau, global_rows=global_rows,
                                   world_size=world_size, amp=amp)
    return a1, a2, q_sum, v_sum


@torch.no_grad()
def pooled_features(model: nn.Module, ids: Tensor, attn: Tensor, ends: Tensor, chunk: int) -> Tensor:
    """``[B, K, d]``: mean of final-layer hidden states over tokens ``0..ends[b, k]`` of each row, no gradient."""
    inner = unwrap(model)
    out = []
    for i in range(0, ids.shape[0], chunk):
        sl = slice(i, i + chunk)
        res = inner(input_ids=ids[sl], attention_mask=attn[sl], position_ids=position_ids_from_mask(attn[sl]),
                    output_hidden_states=True, use_cache=False, logits_to_keep=1)
        h = res.hidden_states[-1].float()
        csum = h.cumsum(dim=1)
        e = ends[sl].to(h.device)
        picked = csum.gather(1, e[..., None].expand(-1, -1, h.shape[-1]))
        out.append((picked / (e[..., None] + 1).float()).cpu())
    return torch.cat(out)
