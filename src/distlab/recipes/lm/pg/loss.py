"""The clipped policy-gradient objective GRPO and SCoRe share (design note ``llm-recipes.md`` section 4).

Exact under any data split; losses and advantage scalings are picked by name from two small registries
(:data:`LOSS_NORMALISERS`, :data:`ADVANTAGE_SCALES`), so a new variant is one function and one entry.

Pure torch: nothing here talks to ``torch.distributed``. Every normaliser is a *global* count for the
optimiser step (all ranks, all gradient-accumulation micro-batches), supplied by the caller in a
:class:`GlobalNorm`, so the gradient does not depend on world size or micro-batching.

Caller contract, for one optimiser step
---------------------------------------
1. Build the masks of every micro-batch this rank will use in the step (after
   :func:`apply_truncation_mask` when ``mask_truncated_completions`` is on), add up
   :func:`local_counts` over them, all-reduce that int64 tensor with SUM over the data-parallel ranks
   once, and make ``norm = GlobalNorm.from_counts(reduced)``.
2. For each micro-batch: ``loss, stats = policy_loss(..., norm=norm, world_size=W)`` then
   ``loss.backward()``, where ``W`` is the number of ranks over which the gradient is later
   **averaged** (DDP / FSDP data-parallel size). Do not divide by the number of micro-batches and do
   not multiply by anything else.
3. Let DDP/FSDP average the gradients (all-reduce SUM / W), or do it by hand the same way. The
   result is exactly the gradient of the global objective. If you reduce with a plain SUM instead,
   pass ``world_size=1``.

Why it is exact: the returned loss without the ``W`` factor is this micro-batch's share of the global
objective (token or sequence sums divided by global counts), so these shares add up over ranks and
micro-batches to the full-batch objective; gradients add the same way, and the ``W`` factor cancels
the mean in the all-reduce. ``stats["objective"]`` holds the share without the factor: SUM-reduce it
to log the objective. All stats are sums, so a SUM all-reduce of them is exact.

``num_iterations`` (mu in DeepSeekMath) is the caller's concern: ``old_logp`` must be the log-probs
of the policy that generated the rollout, detached, computed once before the first update on that
rollout. With ``num_iterations == 1`` (and on the first iteration) that is simply ``logp.detach()``
(pass ``old_logp=None``): the ratio is 1 in value but its gradient is the gradient of ``logp``, so
the loss reduces to the plain policy gradient with the same normalisation. Each optimiser step of
a later iteration builds its own :class:`GlobalNorm` from the sequences that step uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

import torch
from torch import Tensor

from distlab.recipes.lm.config import KLEstimator, ScaleRewards, SequenceLoss


LOSS_TYPES: tuple[str, ...] = tuple(x.value for x in SequenceLoss)

# Keys of the stats dict returned by policy_loss, in order; every value is a sum over local tokens
# or sequences, so stacking them and all-reducing with SUM gives exact global values.
STAT_KEYS: tuple[str, ...] = ("objective", "num_seqs", "num_tokens", "pg_loss_sum", "kl_sum", "ratio_sum",
                              "clip_low", "clip_high", "entropy_sum")


# --------------------------------------------------------------------------------------------- advantages
def reward_moments(rewards: Tensor) -> Tensor:
    """``[count, sum, sum of squares]`` (float64) of local rewards, to SUM-all-reduce for a batch std.

    Needed for ``scale_rewards="batch"`` when each rank only holds part of the step's rewards.
    """
    r = rewards.detach().reshape(-1).to(torch.float64)
    return torch.stack([torch.tensor(float(r.numel()), dtype=torch.float64, device=r.device), r.sum(), (r * r).sum()])


def std_from_moments(moments: Tensor) -> Tensor:
    """Bessel-corrected (unbiased) std from summed :func:`reward_moments`, matching :func:`group_advantages`."""
    n, s, ss = moments.to(torch.float64).unbind()
    if n < 2:
        raise ValueError("a batch std needs at least 2 rewards")
    var = (ss - s * s / n) / (n - 1)
    return var.clamp_min(0.0).sqrt()  # clamp: cancellation can leave -1e-16 for equal rewards


def _value(choice: str | Enum) -> str:
    return choice.value if isinstance(choice, Enum) else str(choice)


def _by_group_std(centred: Tensor, groups: Tensor, batch_std: float | Tensor | None, eps: float) -> Tensor:
    return centred / (groups.std(dim=1, keepdim=True) + eps)


def _by_batch_std(centred: Tensor, groups: Tensor, batch_std: float | Tensor | None, eps: float) -> Tensor:
    std = groups.reshape(-1).std() if batch_std is None else torch.as_tensor(batch_std, dtype=groups.dtype,
                                                                            device=groups.device)
    return centred / (std + eps)


def _unscaled(centred: Tensor, groups: Tensor, batch_std: float | Tensor | None, eps: float) -> Tensor:
    return centred


# scale_rewards name -> f(centred [N, G], rewards [N, G], batch std or None, eps) -> advantages [N, G]
ADVANTAGE_SCALES: dict[str, Callable[..., Tensor]] = {"group": _by_group_std, "batch": _by_batch_std,
                                                      "none": _unscaled}


def group_advantages(rewards: Tensor, group_size: int, scale_rewards: ScaleRewards = "group", eps: float = 1e-4,
                     batch_std: float | Tensor | None = None) -> tuple[Tensor, float]:
    """Group-relative advantages and the fraction of groups whose rewards all agree.

    ``rewards`` is ``[N * G]`` (the G completions of a prompt are consecutive) or ``[N, G]``; the result
    has the same shape. ``A_i = r_i - mean_group(r)``, then divided by ``std_group + eps`` ("group",
    DeepSeekMath), by ``std_batch + eps`` ("batch"; centring stays per group), or not at all ("none",
    Dr. GRPO). Every std is the **unbiased** (Bessel, ``n - 1``) one, as ``torch.std`` computes by
    default and TRL uses; the design note writes ``std(r)`` without saying which.

    The batch std must cover the whole step's rewards: pass ``batch_std`` (for example
    ``std_from_moments`` of all-reduced :func:`reward_moments`) when this call sees only part of them;
    without it the std of ``rewards`` is used. A zero-variance group gets advantage 0 (every term of
    its loss is then 0 apart from KL) and is counted in the returned fraction, a diagnostic worth
    logging: such groups carry no learning signal.
    """
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2 (a group of one has no relative signal), got {group_size}")
    scale = _value(scale_rewards)
    if scale not in ADVANTAGE_SCALES:
        raise ValueError(f"scale_rewards must be one of {', '.join(ADVANTAGE_SCALES)}, got {scale!r}")
    shape = rewards.shape
    r = rewards if rewards.is_floating_point() else rewards.to(torch.get_default_dtype())
    if r.numel() % group_size:
        raise ValueError(f"{r.numel()} rewards are not a whole number of groups of {group_size}")
    if r.dim() == 2 and r.shape[1] != group_size:
        raise ValueError(f"rewards of shape {tuple(shape)} do not have group_size={group_size} columns")
    g = r.detach().reshape(-1, group_size)
    centred = g - g.mean(dim=1, keepdim=True)
    zero_var = g.amax(dim=1) == g.amin(dim=1)  # exact test; a float std can be 1e-17 instead of 0
    adv = ADVANTAGE_SCALES[scale](centred, g, batch_std, eps)
    adv = torch.where(zero_var[:, None], torch.zeros_like(adv), adv)
    return adv.reshape(shape), float(zero_var.float().mean())


# ------------------------------------------------------------------------------------------------- KL
def kl_penalty(logp: Tensor, ref_logp: Tensor, kind: str | KLEstimator = "k3") -> Tensor:
    """Per-token estimate of KL(pi_theta || pi_ref) from samples of pi_theta, with ``d = ref_logp - logp``.

    k1 = -d (unbiased, can be negative), k2 = d^2 / 2 (biased, low variance), k3 = exp(d) - d - 1
    (unbiased and >= 0; DeepSeekMath's choice). k2 and k3 agree to second order in d.
    """
    name = _value(kind)
    if name not in KL_ESTIMATORS:
        raise ValueError(f"kl must be 'k1', 'k2' or 'k3', got {kind!r}")
    return KL_ESTIMATORS[name](ref_logp - logp)


# kl name -> f(d = ref_logp - logp) -> per-token estimate; expm1 keeps k3 precise for small d
KL_ESTIMATORS: dict[str, Callable[[Tensor], Tensor]] = {"k1": lambda d: -d, "k2": lambda d: 0.5 * d * d,
                                                        "k3": lambda d: torch.expm1(d) - d}


# --------------------------------------------------------------------------------------- normalisation
@dataclass(frozen=True)
class GlobalNorm:
    """Counts over the whole optimiser step (all ranks and micro-batches), after truncation masking.

    ``num_seqs`` counts sequences with at least one unmasked token; ``num_tokens`` counts unmasked tokens.
    A step where everything is masked gives loss 0 (the divisors are clamped to 1), not NaN.
    """

    num_seqs: int
    num_tokens: int

    @classmethod
    def from_counts(cls, counts: Tensor) -> GlobalNorm:
        """From a summed :func:`local_counts` tensor ``[num_seqs, num_tokens]``."""
        s, t = (int(v) for v in counts.tolist())
        return cls(num_seqs=s, num_tokens=t)


def local_counts(*masks: Tensor) -> Tensor:
    """``[num_seqs, num_tokens]`` (int64) of one or more ``[B, T]`` masks: SUM-all-reduce it once per step."""
    out = torch.zeros(2, dtype=torch.int64, device=masks[0].device if masks else None)
    for m in masks:
        per_seq = (m != 0).sum(dim=-1)
        out += torch.stack([(per_seq > 0).sum(), per_seq.sum()])
    return out


def apply_truncation_mask(mask: Tensor, truncated: Tensor) -> Tensor:
    """Zero the whole mask row of every truncated completion (``mask_truncated_completions``).

    A completion cut at ``max_completion_length`` never got its reward for finishing, so it is left
    out of the loss and, because counts come from the masks, out of every normaliser too.
    """
    keep = (~truncated.to(torch.bool)).unsqueeze(-1)
    return mask * keep.to(mask.dtype) if mask.dtype != torch.bool else mask & keep


# ---------------------------------------------------------------------------------------------- losses
def truncated_importance_weight(train_logp: Tensor, behaviour_logp: Tensor, cap: float) -> tuple[Tensor, Tensor]:
    """``(min(pi_train / pi_behaviour, cap), truncated)`` per token, from log-probs of the sampled tokens.

    Rollouts sampled ``K`` steps ago (``async.off_policy_steps``) come from an older policy than the one trained;
    weighting each token's policy-gradient term by ``pi_train / pi_behaviour`` makes the gradient the on-policy one
    in expectation, and capping the weight (truncated importance sampling, as TRL's ``vllm_importance_sampling_cap``
    and verl's ``rollout_is_threshold``) bounds the variance a rare token of a lagged batch can add, at the price of
    a small bias on the tokens the cap touches (``truncated``: ratio above ``cap``). Both inputs are detached: the
    weight is a constant of the loss. Equal log-probs give exactly 1.
    """
    ratio = torch.exp(train_logp.detach() - behaviour_logp.detach())
    return ratio.clamp(max=cap), ratio > cap


def clipped_surrogate(logp: Tensor, old_logp: Tensor, advantages: Tensor, epsilon: float,
                      epsilon_high: float | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per-token ``-min(rho A, clip(rho, 1 - eps, 1 + eps_high) A)`` with ``rho = exp(logp - old_logp)``.

    Returns ``(loss, rho, clipped_low, clipped_high)``. The clipped flags mark the tokens whose gradient
    the clip removes: ``rho < 1 - eps`` with ``A < 0`` and ``rho > 1 + eps_high`` with ``A > 0``.
    ``advantages`` is ``[B]`` (one per sequence, broadcast over tokens) or ``[B, T]``.
    """
    eps_high = epsilon if epsilon_high is None else epsilon_high
    adv = advantages.detach().to(logp.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1)
    rho = torch.exp(logp - old_logp)
    surr = rho * adv
    surr_clipped = torch.clamp(rho, 1.0 - epsilon, 1.0 + eps_high) * adv
    loss = -torch.minimum(surr, surr_clipped)
    clipped_low = (rho < 1.0 - epsilon) & (adv < 0)
    clipped_high = (rho > 1.0 + eps_high) & (adv > 0)
    return loss, rho, clipped_low, clipped_high


def _segment_means(masked: Tensor, segments: Sequence[Tensor], norm: GlobalNorm, max_len: int | None) -> Tensor:
    """Mean over segments (sequences, or SCoRe's turns) of each segment's token mean."""
    total = None
    for seg in segments:
        mean = torch.where(seg, masked, torch.zeros_like(masked)).sum(dim=-1) / seg.sum(dim=-1).clamp_min(1)
        total = mean if total is None else total + mean
    return total.sum() / max(norm.num_seqs, 1)


def _token_mean(masked: Tensor, segments: Sequence[Tensor], norm: GlobalNorm, max_len: int | None) -> Tensor:
    return masked.sum() / max(norm.num_tokens, 1)


def _constant_length(masked: Tensor, segments: Sequence[Tensor], norm: GlobalNorm, max_len: int | None) -> Tensor:
    if max_len is None or max_len < 1:
        raise ValueError("loss_type='dr_grpo' needs max_completion_length >= 1")
    longest = max(int(seg.sum(dim=-1).max()) if seg.numel() else 0 for seg in segments)
    if longest > max_len:  # the rows also hold prompts: only their completion tokens are bounded
        raise ValueError(f"a completion of {longest} tokens exceeds max_completion_length={max_len}")
    return masked.sum() / (max(norm.num_seqs, 1) * max_len)


# loss_type name -> this micro-batch's share of the global objective (no world-size factor), from the
# masked per-token losses, the segment masks, the step's global counts and max_completion_length.
# GRPO's names are TRL's; SCoRe's "turn" and "token" are the same rules over (episode, turn) segments.
LOSS_NORMALISERS: dict[str, Callable[..., Tensor]] = {
    "grpo": _segment_means, "turn": _segment_means, "bnpo": _token_mean, "dapo": _token_mean, "token": _token_mean,
    "dr_grpo": _constant_length,
}


def _weighs(beta: float | Tensor) -> bool:
    return bool((beta != 0).any()) if isinstance(beta, Tensor) else beta != 0


def policy_loss(logp: Tensor, old_logp: Tensor | None, ref_logp: Tensor | None, advantages: Tensor,
                mask: Tensor | Sequence[Tensor], *, epsilon: float, epsilon_high: float | None = None,
                beta: float | Tensor = 0.0, kl: str | KLEstimator = "k3", loss_type: str | Enum = "grpo",
                norm: GlobalNorm, max_completion_length: int | None = None, world_size: int = 1,
                entropy: Tensor | None = None, entropy_coef: float = 0.0,
                is_weight: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """This micro-batch's loss, scaled so that the caller contract above gives the exact gradient.

    Per token ``l = -min(rho A, clip(rho, 1 - eps, 1 + eps_high) A) + beta * KL`` over ``[B, T]`` tensors,
    on the tokens of ``mask`` (one ``[B, T]`` mask, or a list of disjoint segment masks such as SCoRe's
    two turns), aggregated with **global** counts from ``norm`` by :data:`LOSS_NORMALISERS`:

    * ``grpo`` (SCoRe: ``turn``): mean over segments of per-segment token means:
      ``sum_seg(sum_tok l / len) / num_seqs``, where ``norm.num_seqs`` counts segments with a token.
    * ``bnpo`` (SCoRe: ``token``): ``sum l / num_tokens``.
    * ``dr_grpo``: ``sum l / (num_seqs * max_completion_length)``, a constant normaliser (Dr. GRPO).
    * ``dapo``: ``sum l / num_tokens``, identical to ``bnpo`` here. In TRL the two differ only in scope:
      ``bnpo`` divides by the tokens of the local (per-process) batch, ``dapo`` by the tokens of the
      global batch, as the DAPO paper's token-level loss over all of a step's groups asks. This module
      always normalises by the global count, so both names give DAPO's loss; both are kept so existing
      configs work.

    A sequence whose tokens are all masked (``mask_truncated_completions``) leaves ``num_seqs`` too: it is
    treated as never sampled (DAPO's overlong filtering), so the weight of the others does not shrink as
    truncation grows. TRL's ``grpo`` and ``dr_grpo`` divide by every sequence of the batch instead, masked ones
    included, which scales the gradient down by the kept fraction; without truncation masking the two agree.

    ``beta`` is a number or a ``[B, T]`` tensor of per-token KL weights (SCoRe weighs its turns apart).
    The returned loss is the share times ``world_size`` (the size of the gradient *mean* all-reduce;
    use 1 for a SUM reduce or a single process). ``old_logp=None`` means ``logp.detach()``
    (``num_iterations == 1``). ``ref_logp`` is needed when ``beta != 0``; when given with ``beta == 0``
    the KL is still measured for ``stats``. ``entropy`` (``[B, T]``, optional) is only summed into
    ``stats`` unless ``entropy_coef > 0``, which adds an entropy bonus ``- entropy_coef * entropy`` per token
    (``entropy`` must then carry gradients). Padded positions are excluded with ``torch.where``, but should
    hold finite values for the gradient to stay finite.

    ``is_weight`` (``[B, T]``, optional): per-token importance weights of rollouts sampled by an older policy
    (:func:`truncated_importance_weight`), multiplying the clipped policy-gradient term only, not the KL or the
    entropy bonus (as TRL applies its ``vllm_importance_sampling_correction``); held constant (detached).

    ``stats`` maps :data:`STAT_KEYS` to detached float64 sums over this micro-batch's unmasked tokens
    (``objective`` is the unscaled share), plus ``kl_seg{i}``/``tokens_seg{i}`` per segment when there
    are several: SUM-reduce them, then divide by the global counts to log means.
    """
    name = _value(loss_type)
    if name not in LOSS_NORMALISERS:
        raise ValueError(f"loss_type must be one of {', '.join(LOSS_NORMALISERS)}, got {loss_type!r}")
    weighted = _weighs(beta)
    if weighted and ref_logp is None:
        raise ValueError("beta != 0 needs ref_logp (the frozen reference model's log-probs)")
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    segments = [mask != 0] if isinstance(mask, Tensor) else [m != 0 for m in mask]
    keep = segments[0]
    for seg in segments[1:]:
        keep = keep | seg
    if old_logp is None:
        old_logp = logp.detach()

    pg, rho, clip_low, clip_high = clipped_surrogate(logp, old_logp, advantages, epsilon, epsilon_high)
    if is_weight is not None:
        pg = pg * is_weight.detach().to(pg.dtype)
    kl_tok = None
    if ref_logp is not None:
        with torch.set_grad_enabled(torch.is_grad_enabled() and weighted):  # beta 0: measured, not trained
            kl_tok = kl_penalty(logp, ref_logp, kl)
    if kl_tok is not None and weighted:
        per_token = pg + (beta.to(pg.dtype) if isinstance(beta, Tensor) else beta) * kl_tok
    else:
        per_token = pg
    if entropy_coef:
        if entropy is None:
            raise ValueError("entropy_coef > 0 needs the per-token entropy")
        per_token = per_token - entropy_coef * entropy
    masked = torch.where(keep, per_token, torch.zeros_like(per_token))

    share = LOSS_NORMALISERS[name](masked, segments, norm, max_completion_length)
    loss = share * world_size if world_size != 1 else share

    def tsum(x: Tensor, where: Tensor = keep) -> Tensor:
        return torch.where(where, x.detach(), torch.zeros((), dtype=x.dtype, device=x.device)).sum().to(torch.float64)

    zero = torch.zeros((), dtype=torch.float64, device=logp.device)
    stats = {
        "objective": share.detach().to(torch.float64),
        "num_seqs": sum((seg.sum(dim=-1) > 0).sum() for seg in segments).to(torch.float64),
        "num_tokens": keep.sum().to(torch.float64),
        "pg_loss_sum": tsum(pg),
        "kl_sum": tsum(kl_tok) if kl_tok is not None else zero,
        "ratio_sum": tsum(rho),
        "clip_low": (clip_low & keep).sum().to(torch.float64),
        "clip_high": (clip_high & keep).sum().to(torch.float64),
        "entropy_sum": tsum(entropy) if entropy is not None else zero.clone(),
    }
    if len(segments) > 1:
        for i, seg in enumerate(segments):
            stats[f"kl_seg{i}"] = tsum(kl_tok, seg) if kl_tok is not None else zero.clone()
            stats[f"tokens_seg{i}"] = seg.sum().to(torch.float64)
    return loss, stats
