"""SCoRe's two-turn objective (design note ``llm-recipes.md`` section 4), per token, exact under any data split.

One episode is ``x | y1 | hint, instruction | y2``; rewards r1 = r(y1), r2 = r(y2) come from the sandbox.

* Stage I maximises r2 while holding turn 1 near the base model: the turn rewards are (0, r2), turn-1
  tokens carry KL weight beta2 (10 x beta1 by default) and turn-2 tokens beta1.
* Stage II maximises r1 + r2 + alpha (r2 - r1) - beta1 KL: turn rewards (r1, r2 + alpha (r2 - r1)), the
  bonus on turn 2's reward, and every policy token carries beta1.

Turn returns are R1 = rew1 + gamma rew2 and R2 = rew2. The default gamma = 1 is the paper's policy gradient
of the episode's total: turn 1 is credited with everything it causes, so in stage II
R1 = (1 - alpha) r1 + (1 + alpha) r2 and a wrong y1 that turn 2 fixes (R1 = 1 + alpha) is worth more than a
right y1 that turn 2 copies (R1 = 2) once alpha > 1. That is where alpha acts: for turn 2 alone the shaped
reward is (1 + alpha) r2 minus a term fixed before y2 is sampled, so its expected gradient is
(1 + alpha) times alpha = 0's in every state (a step size, not a preference for fixing). gamma = 0 (this
recipe's default until 2026-11-27) credits each turn with its own reward only: alpha is then a turn-2 learning
rate multiplier, and stage I leaves turn 1 to its KL anchor (``tests/recipes/score/test_score_credit.py`` computes both
expected gradients exactly).

Per token: ``l = -min(rho A, clip(rho, 1 - eps, 1 + eps) A) + w KL`` on y1 and y2 tokens only, with A the
token's turn advantage and w its KL weight; prompt, hint, instruction and template tokens get no term at all.
The step's loss is the sum over the two turns of each turn's own GRPO-style loss, each with its own global
count: ``turn`` averages each turn's tokens, then averages over that turn's segments; ``token`` averages over
that turn's tokens. A turn's weight therefore does not depend on the other turn's count or length (before
2026-11-27 one count covered both turns, so in stage I turn 1's KL-only segments halved turn 2's gradient).
Counts are global (all ranks and micro-batches, as in ``lm/pg/loss.py``), so the gradient does not depend on
world size or micro-batching.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from distlab.recipes.lm.pg.loss import GlobalNorm, group_advantages, local_counts, policy_loss
from distlab.recipes.lm.rollout.seeds import control_permutation
from distlab.recipes.score.config import GuidanceBaseline
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
    """Each turn's own reward: stage I (0, r2); stage II (r1, r2 + alpha (r2 - r1)). The bonus sits in turn 2's
    reward; turn 1 sees it only through its return (:func:`turn_returns` with gamma > 0)."""
    if stage == "I":
        return torch.zeros_like(r1), r2.clone()
    if stage != "II":
        raise ValueError(f"stage must be 'I' or 'II', got {stage!r}")
    return r1.clone(), r2 + alpha * (r2 - r1)


def turn_returns(rew1: Tensor, rew2: Tensor, gamma: float) -> tuple[Tensor, Tensor]:
    """Returns from each turn on: R1 = rew1 + gamma rew2 (y1 also causes y2), R2 = rew2.

    gamma = 1 is the policy gradient of the episode's total (the paper); gamma = 0 withholds turn 2's outcome,
    and with it alpha, from turn 1."""
    return rew1 + gamma * rew2, rew2.clone()


def mc_advantages(ret1: Tensor, ret2: Tensor, group_size: int, scale_rewards: str = "none"
                  ) -> tuple[Tensor, Tensor, float]:
    """Critic-free baseline: each turn's return minus the mean over the prompt's G episodes (consecutive).

    Centring turn 2's shaped return over the group makes a fix's *advantage* exceed a copy's by alpha, but
    advantages of different states say nothing about what is learned: given y1, the bonus's ``-alpha r1`` is
    fixed before y2 is sampled, so turn 2's expected gradient is ``(1 + alpha)(1 - 1/G)`` times the gradient
    of E[r2] in every state (a step size). Only turn 1's return, through ``gamma``, can prefer a correctable
    y1 (see the module docstring). ``scale_rewards=group`` also divides by the group's std (GRPO).
    Returns ``(A1, A2, zero-variance fraction of the turn-2 groups)``.
    """
    a1, _ = group_advantages(ret1, group_size, scale_rewards)
    a2, zero_var = group_advantages(ret2, group_size, scale_rewards)
    return a1, a2, zero_var


# ------------------------------------------------------------------------------------------ arms
def cell_advantages(rewards: Tensor, cells: Tensor, group_size: int) -> Tensor:
    """Each reward minus the mean over the prompt's episodes in the same cell (equal ``cells`` value, e.g. r1).

    An episode alone in its cell gets 0: nothing in the group saw the same state. Used where the state before the
    trained action is known and differs within a group: a guidance hint after y1 (``guidance_advantages``) and
    turn 2 of the ``bandit_t2`` arm, both of which act after r1 is fixed.
    """
    gg, cc = rewards.float().reshape(-1, group_size), cells.float().reshape(-1, group_size)
    same = (cc[:, :, None] == cc[:, None, :]).float()  # [N, G, G]: the prompt's episodes in the same cell
    base = (same @ gg[:, :, None]).squeeze(-1) / same.sum(-1)
    return (gg - base).reshape(rewards.shape)


def bandit_advantages(r1: Tensor, r2: Tensor, group_size: int) -> tuple[Tensor, Tensor]:
    """``arm=bandit_t2``: ``(A1, A2)`` with A1 = 0 (turn 1 is sampled, never trained) and A2 = r2 minus the mean r2
    of the prompt's turn 2s that followed a y1 of the same score.

    Turn 2 is a one-step bandit whose state is (x, y1): its reward r2 is compared only with turn 2s that started
    from an equally good y1, so a turn 2 is not credited for the y1 it was handed. Within such a cell r1 is a
    constant, so the reward r2 and the gain r2 - r1 give the same advantage: the arm needs no choice between them.
    """
    return torch.zeros_like(r1, dtype=torch.float32), cell_advantages(r2, r1, group_size)


def selective_rewards(r1: Tensor, r2: Tensor, kept: Tensor, bonus: float) -> tuple[Tensor, Tensor]:
    """``arm=selective``: turn rewards ``(r1, r2 + bonus [verdict right])``; turn 2's verdict is "keep" when it
    writes y1 again unchanged (``kept``), "rewrite" otherwise, and it is right when it keeps a right y1 or
    rewrites a wrong one.

    r2 alone already ranks a fix (1) above a kept wrong y1 (0); the bonus adds what r2 cannot see: a right y1
    rewritten into another right answer earns 1, kept it earns 1 + bonus, so the policy learns to leave correct work
    alone (c->i is the failure of self-correction at small sizes) and to rewrite, not copy, a wrong one
    (bonus even when the rewrite still fails). Stage and alpha do not apply to this arm.
    """
    right = (kept.bool() & (r1 > 0.5)) | (~kept.bool() & (r1 <= 0.5))
    return r1.clone(), r2 + bonus * right.to(r2.dtype)


def shuffled_pairs(rew1: Tensor, rew2: Tensor, seed: int) -> tuple[Tensor, Tensor]:
    """The control arm (``shuffle_rewards``): the episodes' (turn-1, turn-2) reward pairs permuted across the batch
    with one seeded permutation, so each pair stays a pair an episode really earned (the joint statistics, means and
    spreads are unchanged) but is credited to another episode: whatever the arm then learns is not from its reward."""
    order = control_permutation(len(rew1), seed)
    return rew1[order], rew2[order]


def token_advantages(roles: Tensor, a1: Tensor, a2: Tensor) -> Tensor:
    """``[B, T]``: A1 on y1 tokens, A2 on y2 tokens, 0 elsewhere."""
    m1, m2 = turn_masks(roles)
    a1, a2 = a1.to(roles.device, torch.float32)[:, None], a2.to(roles.device, torch.float32)[:, None]
    return torch.where(m1, a1, torch.zeros((), device=roles.device)) + torch.where(m2, a2, torch.zeros((), device=roles.device))


@dataclass(frozen=True)
class TurnNorm:
    """The step's global counts for each turn apart: each turn's loss is normalised by its own segments/tokens.

    One shared count would make a turn's weight depend on the other turn: in stage I with gamma = 0, turn 1's
    segments carry only KL yet halved turn 2's policy gradient (``turn``), and a long y1 shrank it (``token``).
    """

    turn1: GlobalNorm
    turn2: GlobalNorm

    @classmethod
    def from_counts(cls, counts: Tensor) -> TurnNorm:
        """From a summed :func:`step_counts` tensor ``[segments 1, tokens 1, segments 2, tokens 2]``."""
        if counts.numel() != 4:
            raise ValueError(f"TurnNorm needs the 4 counts of step_counts, got {counts.numel()}")
        return cls(GlobalNorm.from_counts(counts[:2]), GlobalNorm.from_counts(counts[2:]))

    @property
    def num_tokens(self) -> int:
        return self.turn1.num_tokens + self.turn2.num_tokens


def step_counts(roles: Tensor) -> Tensor:
    """``[turn-1 segments, turn-1 tokens, turn-2 segments, turn-2 tokens]`` of local episodes (int64):
    SUM-all-reduce once per step, then :meth:`TurnNorm.from_counts`."""
    m1, m2 = turn_masks(roles)
    return torch.cat([local_counts(m1), local_counts(m2)])


def score_policy_loss(logp: Tensor, old_logp: Tensor | None, ref_logp: Tensor | None, adv_tok: Tensor, roles: Tensor,
                      kl_w: Tensor, *, epsilon: float, kl: str = "k3", loss_type: str = "turn", norm: TurnNorm,
                      world_size: int = 1, entropy: Tensor | None = None, turns: tuple[int, ...] = (1, 2)
                      ) -> tuple[Tensor, dict[str, Tensor]]:
    """This micro-batch's share of the step's loss (times ``world_size`` for a DDP mean), and SUM-able stats.

    The sum over turns of :func:`~distlab.recipes.lm.pg.loss.policy_loss` on that turn's tokens, normalised by
    that turn's global counts in ``norm`` (:func:`step_counts`). ``kl_w`` (:func:`kl_weights`) is 0 off the
    policy's tokens, and ``ref_logp`` may be ``None`` only when every weight is 0. ``turns`` names the turns with a
    loss term: ``(2,)`` for ``arm=bandit_t2``, whose turn-1 tokens then carry neither policy gradient nor KL.
    """
    if ref_logp is None and bool((kl_w != 0).any()):
        raise ValueError("a nonzero KL weight needs ref_logp")
    if not isinstance(norm, TurnNorm):
        raise TypeError(f"norm must be a TurnNorm (one count per turn), got {type(norm).__name__}")
    total, out = None, {k: None for k in STAT_KEYS}
    for i, (mask, turn_norm) in enumerate(zip(turn_masks(roles), (norm.turn1, norm.turn2)), start=1):
        if i not in turns:
            continue
        loss, s = policy_loss(logp, old_logp, ref_logp, adv_tok, mask, epsilon=epsilon, beta=kl_w, kl=kl,
                              loss_type=loss_type, norm=turn_norm, world_size=world_size, entropy=entropy)
        total = loss if total is None else total + loss
        out[f"kl_y{i}_sum"], out[f"tokens_y{i}"] = s["kl_sum"], s["num_tokens"]
        for key, src in (("objective", "objective"), ("pg_sum", "pg_loss_sum"), ("clip_low", "clip_low"),
                         ("clip_high", "clip_high"), ("entropy_sum", "entropy_sum"), ("ratio_sum", "ratio_sum")):
            out[key] = s[src] if out[key] is None else out[key] + s[src]
    if total is None:
        raise ValueError(f"turns={turns} names no turn; give (1, 2), (1,) or (2,)")
    zero = torch.zeros((), dtype=torch.float32, device=logp.device)
    return total, {k: zero if v is None else v for k, v in out.items()}


# ------------------------------------------------------------------------------------------ guidance
def guidance_rewards(r1: Tensor, r2: Tensor, hint_tokens: Tensor, leaks: Tensor, *, max_tokens: int,
                     len_penalty: float, leak_penalty: float) -> Tensor:
    """The improvement a hint caused, (r2 - r1), less penalties for its length and for writing code."""
    return (r2 - r1) - len_penalty * hint_tokens.float() / max(max_tokens, 1) - leak_penalty * leaks.float()


def guidance_advantages(g: Tensor, r1: Tensor, group_size: int, baseline: str = "r1") -> Tensor:
    """Each hint's reward minus a baseline over the prompt's G hints; ``r1`` decides which hints compare.

    A hint is sampled after y1 is scored, so r1 is part of its state: a hint after a right y1 can only keep
    (r2 - r1 <= 0) and one after a wrong y1 can only help (>= 0). ``baseline="r1"`` compares a hint only with the
    prompt's hints whose y1 scored the same (a hint alone in its cell gets 0: nothing comparable); ``"group"``,
    the mean of all G (this recipe until 2026-11-27), credits every hint with how good its y1 was, which
    the hint did not cause (unbiased, but variance that drowns the hint's effect).
    """
    if baseline not in {b.value for b in GuidanceBaseline}:
        raise ValueError(f"guidance_baseline must be 'r1' or 'group', got {baseline!r}")
    if baseline == "group":
        return group_advantages(g, group_size, "none")[0]
    return cell_advantages(g, r1, group_size)
