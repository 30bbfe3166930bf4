"""SCoRe's two-turn objective (design note ``llm-recipes.md`` section 4), per token, exact under any data split.

One episode is ``x | y1 | hint, instruction | y2``; rewards r1 = r(y1), r2 = r(y2) come from the sandbox.

* Stage I maximises r2 while holding turn 1 near the base model: the turn rewards are (0, r2), turn-1
  tokens carry KL weight beta2 (10 x beta1 by default) and turn-2 tokens beta1.
* Stage II maximises r1 + r2 + alpha (r2 - r1) - beta1 KL: turn rewards (r1, r2 + alpha (r2 - r1)),
  so the bonus sits on turn 2's reward only, and every policy token carries beta1. Turn 2's advantage centres
  that shaped reward over the prompt's group, so a turn 2 that fixes a wrong y1 outranks one that copies a
  right one (``mc_advantages``).

Turn returns are R1 = rew1 + gamma rew2 and R2 = rew2. With the default gamma = 0 each turn is credited
with its own reward: in stage I turn 1 then gets no reward gradient and stays at its KL anchor, and in
stage II the bonus reaches turn 2 only. gamma = 1 credits turn 1 with the whole episode, including
-alpha r1 from the bonus, which rewards a wrong first attempt when alpha > 1 (see ``config.py``). Per token:
``l = -min(rho A, clip(rho, 1 - eps, 1 + eps) A) + w KL`` on y1 and y2 tokens only, with A the token's
turn advantage and w its KL weight; prompt, hint, instruction and template tokens get no term at all.
``turn`` aggregation averages each turn's tokens, then averages over all (episode, turn) segments of
the step; ``token`` averages over every policy token of the step. Counts are global (all ranks and
micro-batches, as in ``lm/pg_loss.py``), so the gradient does not depend on world size or micro-batching.
"""

from __future__ import annotations

import torch
from torch import Tensor

from distlab.recipes.lm.pg_loss import GlobalNorm, group_advantages, local_counts, policy_loss
from distlab.recipes.score.episode import ROLE_Y1, ROLE_Y2

STAT_KEYS = ("objective", "pg_sum", "kl_y1_sum", "kl_y2_sum", "tokens_y1", "tokens_y2", "clip_low", "clip_high",
             "entropy_sum", "ratio_sum")


def turn_masks(roles: Tensor) -> tuple[Tensor, Tensor]:
    """Bool masks of the policy's own tokens: turn 1 (y1) and turn 2 (y2); never hint, instruction or glue."""
    return roles == ROLE_Y1, roles == ROLE_Y2


def kl_weights(roles: Tensor, stage: str, beta1: float, beta2: float) -> Tensor:
    """Per-token KL weight: stage I puts beta2 on y1 and beta1 on y2; stage II beta1 on both; 0 elsewhere."""
    m1, m2 = turn_masks(roles)
    w1 = beta2 if stage == "I" else beta1
    return m1.to(torch.float32) * w1 + m2.to(torch.float32) * beta1


def turn_rewards(r1: Tensor, r2: Tensor, stage: str, alpha: float) -> tuple[Tensor, Tensor]:
    """Each turn's own reward: stage I (0, r2); stage II (r1, r2 + alpha (r2 - r1)), the bonus on turn 2 only."""
    if stage == "I":
        return torch.zeros_like(r1), r2.clone()
    if stage != "II":
        raise ValueError(f"stage must be 'I' or 'II', got {stage!r}")
    return r1.clone(), r2 + alpha * (r2 - r1)


def turn_returns(rew1: Tensor, rew2: Tensor, gamma: float) -> tuple[Tensor, Tensor]:
    """Returns from each turn on: R1 = rew1 + gamma rew2 (y1 also causes y2), R2 = rew2."""
    return rew1 + gamma * rew2, rew2.clone()


def mc_advantages(ret1: Tensor, ret2: Tensor, group_size: int, scale_rewards: str = "none"
                  ) -> tuple[Tensor, Tensor, float]:
    """Critic-free baseline: each turn's return minus the mean over the prompt's G episodes (consecutive).

    Turn 2's return in stage II is the shaped ``r2 + alpha (r2 - r1)``, centred over the group *as a whole*.
    That is what makes the bonus do something: in a group where one episode copies a correct y1 (r1 = r2 = 1)
    and another fixes a wrong one (r1 = 0, r2 = 1), the fix's turn 2 earns ``alpha`` more than the copy's, and
    breaking a correct y1 costs ``alpha`` more than failing twice. (Moving ``-alpha r1``, the part fixed before
    y2 is sampled, into a per-episode baseline would also be unbiased, but it leaves ``(1 + alpha)(r2 -
    mean r2)``: a step size with ``scale_rewards=none`` and exactly nothing with ``group``, which is how an
    earlier version of this recipe ran.) ``scale_rewards=group`` also divides by the group's std (GRPO).
    Returns ``(A1, A2, zero-variance fraction of the turn-2 groups)``.
    """
    a1, _ = group_advantages(ret1, group_size, scale_rewards)
    a2, zero_var = group_advantages(ret2, group_size, scale_rewards)
    return a1, a2, zero_var


def token_advantages(roles: Tensor, a1: Tensor, a2: Tensor) -> Tensor:
    """``[B, T]``: A1 on y1 tokens, A2 on y2 tokens, 0 elsewhere."""
    m1, m2 = turn_masks(roles)
    a1, a2 = a1.to(roles.device, torch.float32)[:, None], a2.to(roles.device, torch.float32)[:, None]
    return torch.where(m1, a1, torch.zeros((), device=roles.device)) + torch.where(m2, a2, torch.zeros((), device=roles.device))


def step_counts(roles: Tensor) -> Tensor:
    """``[turn segments with a token, policy tokens]`` of local episodes: SUM-all-reduce once per step."""
    return local_counts(*turn_masks(roles))


def score_policy_loss(logp: Tensor, old_logp: Tensor | None, ref_logp: Tensor | None, adv_tok: Tensor, roles: Tensor,
                      kl_w: Tensor, *, epsilon: float, kl: str = "k3", loss_type: str = "turn", norm: GlobalNorm,
                      world_size: int = 1, entropy: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """This micro-batch's share of the step's loss (times ``world_size`` for a DDP mean), and SUM-able stats.

    ``norm.num_seqs`` counts (episode, turn) segments and ``norm.num_tokens`` policy tokens over the
    whole step (:func:`step_counts`). ``kl_w`` (:func:`kl_weights`) is 0 off the policy's tokens, and
    ``ref_logp`` may be ``None`` only when every weight is 0.
    """
    m1, m2 = turn_masks(roles)
    if ref_logp is None and bool((kl_w != 0).any()):
        raise ValueError("a nonzero KL weight needs ref_logp")
    loss, s = policy_loss(logp, old_logp, ref_logp, adv_tok, [m1, m2], epsilon=epsilon, beta=kl_w, kl=kl,
                          loss_type=loss_type, norm=norm, world_size=world_size, entropy=entropy)
    return loss, {"objective": s["objective"], "pg_sum": s["pg_loss_sum"], "kl_y1_sum": s["kl_seg0"],
                  "kl_y2_sum": s["kl_seg1"], "tokens_y1": s["tokens_seg0"], "tokens_y2": s["tokens_seg1"],
                  "clip_low": s["clip_low"], "clip_high": s["clip_high"], "entropy_sum": s["entropy_sum"],
                  "ratio_sum": s["ratio_sum"]}


# ------------------------------------------------------------------------------------------ guidance
def guidance_rewards(r1: Tensor, r2: Tensor, hint_tokens: Tensor, leaks: Tensor, *, max_tokens: int,
                     len_penalty: float, leak_penalty: float) -> Tensor:
    """The improvement a hint caused, (r2 - r1), less penalties for its length and for writing code."""
    return (r2 - r1) - len_penalty * hint_tokens.float() / max(max_tokens, 1) - leak_penalty * leaks.float()
