"""GRPO loss pieces against numbers worked out by hand (comments show the arithmetic)."""

import math

import pytest
import torch

from distlab.recipes.lm.pg.loss import (STAT_KEYS, GlobalNorm, apply_truncation_mask, clipped_surrogate,
                                       group_advantages, kl_penalty, local_counts, policy_loss, reward_moments,
                                       std_from_moments)

F64 = torch.float64


def t(x):
    return torch.tensor(x, dtype=F64)


# ------------------------------------------------------------------------------------------ advantages
# Three groups of G=3. g1 = [1,3,5]: mean 3, centred [-2,0,2], unbiased var 8/2 = 4, std 2.
# g2 = [2,2,2]: zero variance. g3 = [4,0,2]: mean 2, centred [2,-2,0], std 2.
# Whole batch: sum 21, sum of squares 67, n 9 -> SS = 67 - 441/9 = 18, unbiased var 18/8 = 2.25, std 1.5.
REWARDS = [1.0, 3.0, 5.0, 2.0, 2.0, 2.0, 4.0, 0.0, 2.0]
CENTRED = [-2.0, 0.0, 2.0, 0.0, 0.0, 0.0, 2.0, -2.0, 0.0]


def test_group_scaling_uses_unbiased_group_std_and_counts_zero_variance_groups():
    adv, frac = group_advantages(t(REWARDS), 3, "group")
    assert torch.allclose(adv, t(CENTRED) / (2.0 + 1e-4), rtol=0, atol=1e-12)  # biased std would be 1.633
    assert frac == pytest.approx(1 / 3)
    adv0, _ = group_advantages(t(REWARDS), 3, "group", eps=0.0)  # eps 0: zero-variance group stays 0, not NaN
    assert adv0.tolist() == [-1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, -1.0, 0.0]


def test_batch_scaling_uses_batch_std_and_group_centring():
    adv, frac = group_advantages(t(REWARDS), 3, "batch", eps=0.0)
    assert torch.allclose(adv, t(CENTRED) / 1.5, rtol=0, atol=1e-12)  # [-4/3, 0, 4/3, 0,0,0, 4/3, -4/3, 0]
    assert frac == pytest.approx(1 / 3)
    # Only part of the step visible here: the global std is passed in and must be the one used.
    part, _ = group_advantages(t(REWARDS[:3]), 3, "batch", eps=1e-4, batch_std=1.5)
    assert torch.allclose(part, t([-2.0, 0.0, 2.0]) / 1.5001, rtol=0, atol=1e-12)


def test_batch_std_from_summed_moments_of_parts():
    moments = reward_moments(t(REWARDS[:4])) + reward_moments(t(REWARDS[4:]))  # what SUM all-reduce gives
    assert moments.tolist() == [9.0, 21.0, 67.0]
    assert std_from_moments(moments).item() == pytest.approx(1.5, abs=1e-12)
    assert std_from_moments(reward_moments(t([2.0, 2.0, 2.0]))).item() == 0.0


def test_no_scaling_and_2d_shape():
    adv, frac = group_advantages(t(REWARDS).reshape(3, 3), 3, "none")
    assert adv.shape == (3, 3)
    assert adv.reshape(-1).tolist() == CENTRED
    assert frac == pytest.approx(1 / 3)
    adv_int, _ = group_advantages(torch.tensor([0, 1, 1, 1]), 4, "none")  # integer rewards: float result
    assert adv_int.tolist() == [-0.75, 0.25, 0.25, 0.25]


def test_advantage_argument_errors():
    with pytest.raises(ValueError):
        group_advantages(t(REWARDS), 4)
    with pytest.raises(ValueError):
        group_advantages(t(REWARDS), 1)
    with pytest.raises(ValueError):
        group_advantages(t(REWARDS), 3, "std")


# ------------------------------------------------------------------------------------------ clipping
# eps_low 0.2, eps_high 0.28: clip range [0.8, 1.28]. Per token loss -min(rho A, clip(rho) A).
CASES = [  # rho, A, loss, d loss / d logp (= -rho A when unclipped, 0 when clipped), clipped low, clipped high
    (1.5, +1.0, -1.28, 0.0, False, True),   # min(1.5, 1.28) = 1.28: clipped high
    (1.5, -1.0, +1.5, 1.5, False, False),   # min(-1.5, -1.28) = -1.5: unclipped, pushed down
    (0.5, +1.0, -0.5, -0.5, False, False),  # min(0.5, 0.8) = 0.5: unclipped
    (0.5, -1.0, +0.8, 0.0, True, False),    # min(-0.5, -0.8) = -0.8: clipped low
    (1.25, +1.0, -1.25, -1.25, False, False),  # inside [0.8, 1.28]; a symmetric 0.2 would clip it to -1.2
    (0.75, -1.0, +0.8, 0.0, True, False),   # 0.75 < 0.8 with A < 0: clipped low
    (1.0, -2.0, +2.0, 2.0, False, False),   # rho 1: plain policy gradient
]


def _clip_inputs():
    rho = t([c[0] for c in CASES])
    old = torch.full((len(CASES),), -1.3, dtype=F64)
    logp = (old + rho.log()).requires_grad_(True)
    return logp, old, t([c[1] for c in CASES])


def test_clip_both_sides_asymmetric_losses_gradients_and_flags():
    logp, old, adv = _clip_inputs()
    loss, rho, low, high = clipped_surrogate(logp.unsqueeze(-1), old.unsqueeze(-1), adv, 0.2, 0.28)
    assert torch.allclose(rho.squeeze(-1), t([c[0] for c in CASES]), atol=1e-12)
    assert torch.allclose(loss.squeeze(-1), t([c[2] for c in CASES]), atol=1e-12)
    assert low.squeeze(-1).tolist() == [c[4] for c in CASES]
    assert high.squeeze(-1).tolist() == [c[5] for c in CASES]
    loss.sum().backward()
    assert torch.allclose(logp.grad, t([c[3] for c in CASES]), atol=1e-12)


def test_symmetric_epsilon_clips_the_high_side_at_1_plus_eps():
    logp, old, adv = _clip_inputs()
    loss, _, _, high = clipped_surrogate(logp.detach().unsqueeze(-1), old.unsqueeze(-1), adv, 0.2)
    assert loss[4].item() == pytest.approx(-1.2, abs=1e-12)  # rho 1.25 clipped to 1.2 now
    assert high.squeeze(-1).tolist() == [True, False, False, False, True, False, False]


def test_policy_loss_counts_clips_in_stats_and_adds_beta_kl():
    logp, old, adv = _clip_inputs()
    # One token per sequence, bnpo over 7 tokens. ref = logp + 1 on every token: d = 1, k3 = e - 2.
    ref = logp.detach() + 1.0
    loss, stats = policy_loss(logp.unsqueeze(-1), old.unsqueeze(-1), ref.unsqueeze(-1), adv,
                              torch.ones(7, 1), epsilon=0.2, epsilon_high=0.28, beta=0.1, kl="k3",
                              loss_type="bnpo", norm=GlobalNorm(num_seqs=7, num_tokens=7))
    pg_sum = sum(c[2] for c in CASES)  # -1.28 + 1.5 - 0.5 + 0.8 - 1.25 + 0.8 + 2.0 = 2.07
    assert pg_sum == pytest.approx(2.07)
    k3 = math.e - 2.0
    assert loss.item() == pytest.approx((2.07 + 0.1 * 7 * k3) / 7, abs=1e-12)
    assert list(stats) == list(STAT_KEYS)
    assert stats["clip_low"].item() == 2 and stats["clip_high"].item() == 1
    assert stats["kl_sum"].item() == pytest.approx(7 * k3, abs=1e-12)
    assert stats["pg_loss_sum"].item() == pytest.approx(2.07, abs=1e-12)
    assert stats["ratio_sum"].item() == pytest.approx(1.5 + 1.5 + 0.5 + 0.5 + 1.25 + 0.75 + 1.0, abs=1e-12)
    assert stats["num_tokens"].item() == 7 and stats["num_seqs"].item() == 7
    assert stats["objective"].item() == pytest.approx(loss.item(), abs=1e-15)
    # KL gradient: d/dlogp of beta*k3 = beta*(1 - e^d) = 0.1 * (1 - e), per token, over 7 tokens.
    loss.backward()
    expect = (t([c[3] for c in CASES]) + 0.1 * (1.0 - math.e)) / 7
    assert torch.allclose(logp.grad, expect, atol=1e-12)


def test_beta_without_reference_is_an_error():
    with pytest.raises(ValueError):
        policy_loss(torch.zeros(1, 1), None, None, t([1.0]), torch.ones(1, 1), epsilon=0.2, beta=0.1,
                    norm=GlobalNorm(1, 1))


# ------------------------------------------------------------------------------------------------ KL
def test_kl_estimators_hand_values():
    logp = t([0.0, 0.0, 0.0, -2.0])
    ref = t([1.0, -1.0, 0.0, -2.5])  # d = [1, -1, 0, -0.5]
    assert torch.allclose(kl_penalty(logp, ref, "k1"), t([-1.0, 1.0, 0.0, 0.5]), atol=1e-15)
    assert torch.allclose(kl_penalty(logp, ref, "k2"), t([0.5, 0.5, 0.0, 0.125]), atol=1e-15)
    # k3: e - 2 = 0.718281828..., 1/e = 0.367879441..., 0, e^-0.5 - 0.5 = 0.106530660...
    assert torch.allclose(kl_penalty(logp, ref, "k3"), t([0.718281828459045, 0.367879441171442, 0.0,
                                                         0.106530659712633]), atol=1e-12)
    with pytest.raises(ValueError):
        kl_penalty(logp, ref, "k4")


def test_k3_nonnegative_and_close_to_k2_for_small_d():
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(1000, generator=g, dtype=F64) * 5
    ref = torch.randn(1000, generator=g, dtype=F64) * 5
    assert (kl_penalty(logp, ref, "k3") >= 0).all()
    d = t([1e-2, -1e-2, 1e-4, -3e-3])
    k2, k3 = kl_penalty(torch.zeros(4, dtype=F64), d, "k2"), kl_penalty(torch.zeros(4, dtype=F64), d, "k3")
    # k3 - k2 = d^3/6 + O(d^4)
    assert torch.allclose(k3 - k2, d ** 3 / 6, rtol=0.02, atol=0)
    assert k3[2].item() == pytest.approx(5e-9, rel=1e-4)  # expm1 keeps it exact to the last digits


# ---------------------------------------------------------------------------------------- aggregation
def _agg_batch():
    """A = -1 and epsilon 10 (no clipping), beta 0: per-token loss = rho, set token by token.

    seq0 len 1: [3]; seq1 len 3: [1, 2, 3]; seq2 len 2: [4, 4]; seq3 truncated: [50, 50, 50, 50];
    padding holds 100 to catch any leak through the mask.
    """
    rho = t([[3, 100, 100, 100], [1, 2, 3, 100], [4, 4, 100, 100], [50, 50, 50, 50]])
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    mask = apply_truncation_mask(mask, torch.tensor([False, False, False, True]))
    logp = rho.log().requires_grad_(True)
    return logp, torch.zeros_like(rho), t([-1.0, -1.0, -1.0, -1.0]), mask


# Token sum 3 + 6 + 8 = 17 over 6 tokens and 3 sequences (the truncated one is out of everything).
# grpo: (3/1 + 6/3 + 8/2) / 3 = 9/3 = 3.   bnpo, dapo: 17/6.   dr_grpo, L=5: 17 / (3*5) = 17/15.
EXPECTED = {"grpo": 3.0, "bnpo": 17 / 6, "dapo": 17 / 6, "dr_grpo": 17 / 15}


@pytest.mark.parametrize("loss_type", list(EXPECTED))
def test_aggregations_with_unequal_lengths(loss_type):
    logp, old, adv, mask = _agg_batch()
    assert local_counts(mask).tolist() == [3, 6]
    norm = GlobalNorm.from_counts(local_counts(mask))
    loss, stats = policy_loss(logp, old, None, adv, mask, epsilon=10.0, loss_type=loss_type, norm=norm,
                              max_completion_length=5)
    assert loss.item() == pytest.approx(EXPECTED[loss_type], abs=1e-12)
    assert stats["num_seqs"].item() == 3 and stats["num_tokens"].item() == 6
    assert stats["pg_loss_sum"].item() == pytest.approx(17.0, abs=1e-12)
    # Global counts twice the local ones (another rank holds as much again): the share halves.
    half, _ = policy_loss(logp, old, None, adv, mask, epsilon=10.0, loss_type=loss_type,
                          norm=GlobalNorm(num_seqs=6, num_tokens=12), max_completion_length=5)
    assert half.item() == pytest.approx(EXPECTED[loss_type] / 2, abs=1e-12)
    # world_size W multiplies the returned loss (DDP then divides the gradient by W), not the stats.
    scaled, st = policy_loss(logp, old, None, adv, mask, epsilon=10.0, loss_type=loss_type,
                             norm=GlobalNorm(num_seqs=6, num_tokens=12), max_completion_length=5, world_size=4)
    assert scaled.item() == pytest.approx(2 * EXPECTED[loss_type], abs=1e-12)
    assert st["objective"].item() == pytest.approx(EXPECTED[loss_type] / 2, abs=1e-12)
    # Gradient never reaches padding or the truncated sequence.
    loss.backward()
    assert (logp.grad[~mask] == 0).all() and (logp.grad[mask] != 0).all()


def test_grpo_gradient_weights_tokens_by_inverse_length():
    logp, old, adv, mask = _agg_batch()
    loss, _ = policy_loss(logp, old, None, adv, mask, epsilon=10.0, loss_type="grpo", norm=GlobalNorm(3, 6))
    loss.backward()
    # d(rho)/d(logp) = rho; token weight 1/(len * 3): seq0 3/3 = 1; seq1 [1,2,3]/9; seq2 [4,4]/6.
    assert torch.allclose(logp.grad[0, :1], t([1.0]), atol=1e-12)
    assert torch.allclose(logp.grad[1, :3], t([1 / 9, 2 / 9, 3 / 9]), atol=1e-12)
    assert torch.allclose(logp.grad[2, :2], t([4 / 6, 4 / 6]), atol=1e-12)


def test_dr_grpo_needs_max_completion_length_and_entropy_is_summed_over_mask():
    logp, old, adv, mask = _agg_batch()
    with pytest.raises(ValueError):
        policy_loss(logp, old, None, adv, mask, epsilon=0.2, loss_type="dr_grpo", norm=GlobalNorm(3, 6))
    with pytest.raises(ValueError, match="completion of 3 tokens"):
        policy_loss(logp, old, None, adv, mask, epsilon=0.2, loss_type="dr_grpo", norm=GlobalNorm(3, 6),
                    max_completion_length=2)  # shorter than the 3 tokens of the longest unmasked completion
    # rows wider than max_completion_length are fine: they hold the prompt too (this crashed every real batch)
    wide = torch.nn.functional.pad(mask, (6, 0))
    loss, _ = policy_loss(torch.nn.functional.pad(logp.detach(), (6, 0)), torch.nn.functional.pad(old, (6, 0)), None,
                          adv, wide, epsilon=10.0, loss_type="dr_grpo", norm=GlobalNorm(3, 6), max_completion_length=5)
    assert loss.item() == pytest.approx(EXPECTED["dr_grpo"], abs=1e-12)
    ent = torch.arange(16, dtype=F64).reshape(4, 4)
    _, stats = policy_loss(logp, old, None, adv, mask, epsilon=0.2, loss_type="bnpo", norm=GlobalNorm(3, 6),
                           entropy=ent)
    assert stats["entropy_sum"].item() == 0 + 4 + 5 + 6 + 8 + 9  # 32


def test_old_logp_none_is_ratio_one_with_policy_gradient():
    logp = t([[-0.7, -1.2]]).requires_grad_(True)
    loss, stats = policy_loss(logp, None, None, t([2.0]), torch.ones(1, 2), epsilon=0.2, loss_type="bnpo",
                              norm=GlobalNorm(1, 2))
    assert loss.item() == pytest.approx(-2.0) and stats["ratio_sum"].item() == pytest.approx(2.0)
    loss.backward()
    assert torch.allclose(logp.grad, t([[-1.0, -1.0]]))  # -A / num_tokens


def test_beta_zero_measures_kl_without_training_it():
    logp = t([[0.0]]).requires_grad_(True)
    loss, stats = policy_loss(logp, None, t([[1.0]]), t([0.0]), torch.ones(1, 1), epsilon=0.2, beta=0.0,
                              loss_type="bnpo", norm=GlobalNorm(1, 1))
    assert stats["kl_sum"].item() == pytest.approx(math.e - 2.0)  # d = 1
    assert loss.item() == 0.0
    loss.backward()
    assert logp.grad.item() == 0.0  # A = 0 and no KL term
