"""What SCoRe's returns teach, as *expected gradients* of the recipe's own advantage functions (no LM, no sampling).

A toy two-turn policy: turn 1 is right with probability p = sigmoid(phi); turn 2 is right with probability q[k]
= sigmoid(theta[k]) after a turn 1 of score k (0 wrong, 1 right). The policy-gradient estimate of one prompt's
group of G episodes is ``(1/G) sum_i A1_i d/dphi log pi(y1_i) + A2_i d/dtheta log pi(y2_i | y1_i)`` with
``d/dphi log pi(y1) = r1 - p`` and ``d/dtheta[k] log pi(y2 | k) = (r2 - q[k]) [r1 = k]``. Its expectation is
computed exactly, by summing over all 4**G outcomes of a group, and compared with what it is by hand: with a
group-mean baseline (self included), E[A f] = (1 - 1/G) Cov(R, f), so

    d/dphi:      (1 - 1/G) p (1 - p) (E[R1 | r1 = 1] - E[R1 | r1 = 0])
    d/dtheta[k]: (1 - 1/G) P(r1 = k) q[k] (1 - q[k]) (R2(k, r2 = 1) - R2(k, r2 = 0))

The review's script A (shared/design/llm-review.md, F1) sampled the turn-2 part; these sums are its exact form.
"""

import itertools

import pytest
import torch

from distlab.recipes.score.config import ScoreConfig
from distlab.recipes.score.objective import mc_advantages, turn_returns, turn_rewards

G = 4
OUTCOMES = [(r1, r2) for r1 in (0.0, 1.0) for r2 in (0.0, 1.0)]


def expected_gradient(p: float, q: tuple[float, float], alpha: float, gamma: float, stage: str = "II",
                      scale: str = "none") -> tuple[float, float, float]:
    """``(d/dphi, d/dtheta[0], d/dtheta[1])`` of the expected per-episode surrogate, summed over every group."""
    out = torch.zeros(3, dtype=torch.float64)
    p_t, q0, q1 = (torch.tensor(x, dtype=torch.float64) for x in (p, q[0], q[1]))  # scalars would give float32
    for group in itertools.product(OUTCOMES, repeat=G):
        r1 = torch.tensor([o[0] for o in group], dtype=torch.float64)
        r2 = torch.tensor([o[1] for o in group], dtype=torch.float64)
        q_of = torch.where(r1 == 1, q1, q0)
        prob = torch.prod(torch.where(r1 == 1, p_t, 1 - p_t) * torch.where(r2 == 1, q_of, 1 - q_of))
        a1, a2, _ = mc_advantages(*turn_returns(*turn_rewards(r1, r2, stage, alpha), gamma), G, scale)
        out += prob * torch.stack([(a1 * (r1 - p)).mean()] +
                                  [(a2 * (r2 - q_of) * (r1 == k)).mean() for k in (0, 1)])
    return tuple(out.tolist())


def test_the_default_credits_turn_one_with_the_episode():
    assert ScoreConfig().gamma == 1.0


def test_a_fixed_wrong_first_attempt_is_worth_more_than_a_copied_right_one():
    """Turn 2 always fixes a wrong y1 and always keeps a right one (q = 1, 1): the only choice left is turn 1's,
    between the path "wrong, fixed" (r1, r2 = 0, 1) and "right, copied" (1, 1). Under the recipe's default the
    bonus must make the first worth more; before 2026-11-27 (gamma = 0) turn 1 never saw alpha at all."""
    p, gamma = 0.4, ScoreConfig().gamma
    # by hand: R1 = r1 + r2 + alpha (r2 - r1): fixed path 1 + alpha, copied path 2
    # -> d/dphi = (1 - 1/4) 0.4 0.6 (2 - (1 + alpha)) = 0.18 (1 - alpha)
    for alpha, want in ((0.0, 0.18), (10.0, -1.62)):
        got = expected_gradient(p, (1.0, 1.0), alpha, gamma)[0]
        assert got == pytest.approx(want, abs=1e-12), (alpha, got)
    assert expected_gradient(p, (1.0, 1.0), 10.0, gamma)[0] < 0 < expected_gradient(p, (1.0, 1.0), 0.0, gamma)[0]
    # gamma = 0 (the old default, kept in the demo presets): turn 1 learns r1 alone, 0.18 whatever alpha is
    for alpha in (0.0, 10.0):
        assert expected_gradient(p, (1.0, 1.0), alpha, 0.0)[0] == pytest.approx(0.18, abs=1e-12)


def test_turn_one_learns_how_correctable_its_answer_is():
    """A stochastic turn 2 (q = 0.25 after a wrong y1, 0.75 after a right one), the default gamma.

    By hand, E[R1 | r1] = r1 + (1 + alpha) q[r1] - alpha r1: alpha 0: 0.25 and 1.75, d/dphi = 0.18 x 1.5 = 0.27;
    alpha 10: 2.75 and -0.75, d/dphi = 0.18 x (-3.5) = -0.63."""
    p, q, gamma = 0.4, (0.25, 0.75), ScoreConfig().gamma
    assert expected_gradient(p, q, 0.0, gamma)[0] == pytest.approx(0.27, abs=1e-12)
    assert expected_gradient(p, q, 10.0, gamma)[0] == pytest.approx(-0.63, abs=1e-12)


@pytest.mark.parametrize("gamma", [0.0, 1.0])
def test_turn_two_alone_gets_only_a_step_size_from_alpha(gamma):
    """Turn 2's expected gradient is (1 + alpha)(1 - 1/G) P(k) q[k](1 - q[k]) in both states, whatever gamma:
    no turn-2 reward linear in r2 can prefer fixing to keeping (review F1; script A measured 11.01 and 11.03)."""
    p, q = 0.4, (0.25, 0.75)
    for alpha in (0.0, 10.0):
        _, g0, g1 = expected_gradient(p, q, alpha, gamma)
        assert g0 == pytest.approx((1 + alpha) * 0.75 * 0.6 * 0.25 * 0.75, abs=1e-12)
        assert g1 == pytest.approx((1 + alpha) * 0.75 * 0.4 * 0.75 * 0.25, abs=1e-12)


def test_stage_one_credits_turn_one_with_turn_two_only():
    """Stage I's rewards are (0, r2), so with gamma = 1 turn 1 learns E[r2 | r1] (its KL holds it, not its return):
    d/dphi = 0.18 (q[1] - q[0]) = 0.18 x 0.5 = 0.09; with gamma = 0 turn 1 gets no reward gradient at all."""
    p, q = 0.4, (0.25, 0.75)
    assert expected_gradient(p, q, 10.0, 1.0, stage="I")[0] == pytest.approx(0.09, abs=1e-12)
    assert expected_gradient(p, q, 10.0, 0.0, stage="I")[0] == pytest.approx(0.0, abs=1e-12)
