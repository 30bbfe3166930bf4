"""Three of SCoRe's baselines and normalisers on hand-built episodes, each number computed by hand (review D10-D12).

D10: a hint is compared only with hints that followed an equally scored y1 (r1 is known before the hint).
D11: each turn's loss has its own count, so turn 1's KL-only segments in stage I do not halve turn 2's gradient.
D12: the critic scores a step's transitions before it is fitted on them.
"""

import pytest
import torch
from torch import nn

from distlab.config import resolve_config
from distlab.errors import DistlabError
from distlab.recipe import load_recipe
from distlab.recipes.score.config import ScoreConfig
from distlab.recipes.score.critic import Transitions, critic_advantages, make_target, score_then_fit
from distlab.recipes.score.episode import ROLE_PAD, ROLE_PROMPT, ROLE_Y1, ROLE_Y2
from distlab.recipes.score.objective import (TurnNorm, guidance_advantages, guidance_rewards, kl_weights,
                                             score_policy_loss, step_counts, token_advantages)
from distlab.recipes.score.recipe import check

P, Y1, Y2, X = ROLE_PROMPT, ROLE_Y1, ROLE_Y2, ROLE_PAD


# ------------------------------------------------------------------------------------------ D10 guidance
def test_a_hint_is_compared_with_hints_after_an_equally_scored_first_attempt():
    """One prompt, four hints: y1 wrong, wrong, right, right; turn 2 right, wrong, right, right; no penalties.

    Guidance rewards r2 - r1 = 1, 0, 0, 0. The hint that fixed a wrong y1 is compared with the other hint after a
    wrong y1 (mean 0.5): +0.5 and -0.5; the two hints after a right y1 kept it alike: 0 and 0. The whole-group mean
    (0.25) would charge each kept answer -0.25 for a y1 the hint did not write."""
    r1, r2 = torch.tensor([0.0, 0.0, 1.0, 1.0]), torch.tensor([1.0, 0.0, 1.0, 1.0])
    g = guidance_rewards(r1, r2, torch.zeros(4), torch.zeros(4), max_tokens=48, len_penalty=0.0, leak_penalty=0.0)
    assert torch.equal(guidance_advantages(g, r1, 4), torch.tensor([0.5, -0.5, 0.0, 0.0]))
    assert torch.equal(guidance_advantages(g, r1, 4, "group"), torch.tensor([0.75, -0.25, -0.25, -0.25]))
    assert ScoreConfig().guidance_baseline == "r1"


def test_a_hint_alone_in_its_cell_gets_no_advantage_and_groups_stay_apart():
    """Two prompts of G = 2. Prompt A: y1 wrong then right (rewards 1 and 0): each alone in its cell, 0 and 0.
    Prompt B: both y1 wrong, hint lengths 12 and 36 of 48 at penalty 0.2 (rewards 1 - 0.05 and 0 - 0.15):
    mean 0.4, advantages +0.55 and -0.55."""
    r1, r2 = torch.tensor([0.0, 1.0, 0.0, 0.0]), torch.tensor([1.0, 1.0, 1.0, 0.0])
    g = guidance_rewards(r1, r2, torch.tensor([0, 0, 12, 36]), torch.zeros(4), max_tokens=48, len_penalty=0.2,
                         leak_penalty=1.0)
    torch.testing.assert_close(guidance_advantages(g, r1, 2), torch.tensor([0.0, 0.0, 0.55, -0.55]))
    with pytest.raises(ValueError, match="guidance_baseline must be 'r1' or 'group'"):
        guidance_advantages(g, r1, 2, "prompt")


@pytest.mark.parametrize("override, message", [("guidance_baseline=prompt", r"expected one of \[r1, group\]"),
                                               ("gamma=1.5", r"0 <= gamma <= 1 \(got tau=0.1, gamma=1.5\)")])
def test_bad_credit_settings_fail_in_one_line(override, message):
    with pytest.raises(DistlabError, match=message):
        check(resolve_config(load_recipe("score"), [], ["model.source=tiny:llama-2l", "model.prompt_mode=text",
                                                        override]), 1)


# ------------------------------------------------------------------------------------------- D11 normalisers
def _turn_two_grad(roles: torch.Tensor, a2: list[float], loss_type: str) -> torch.Tensor:
    """Gradient of stage I's loss (gamma = 0: A1 = 0; no KL) with respect to each token's log-prob."""
    logp = torch.full(roles.shape, -1.0, requires_grad=True)
    adv = token_advantages(roles, torch.zeros(len(a2)), torch.tensor(a2))
    loss, _ = score_policy_loss(logp, None, None, adv, roles, kl_weights(roles, "I", 0.0, 0.0), epsilon=0.2,
                                loss_type=loss_type, norm=TurnNorm.from_counts(step_counts(roles)))
    loss.backward()
    return logp.grad


WITH_Y1 = torch.tensor([[P, Y1, Y1, Y1, Y2, Y2, X], [P, Y1, Y1, Y2, Y2, Y2, X]])
LONG_Y1 = torch.tensor([[Y1, Y1, Y1, Y1, Y2, Y2, X], [Y1, Y1, Y1, Y1, Y2, Y2, Y2]])  # same y2s, longer y1s
NO_Y1 = torch.tensor([[P, P, P, P, Y2, Y2, X], [P, P, P, Y2, Y2, Y2, X]])  # the same y2s without a turn 1


def test_turn_one_segments_do_not_halve_turn_two_in_stage_one():
    """A2 = 3 and 4 on y2s of 2 and 3 tokens. ``turn``: -A / (length x 2 turn-2 segments) = -0.75 and -4/6 per
    token (one count over both turns gave -3/8 and -1/3); ``token``: -A / 5 turn-2 tokens = -0.6 and -0.8 (one count
    over both turns' 10 tokens gave half that, and less as y1 grew). Either way, exactly as if turn 1 were absent."""
    for roles in (WITH_Y1, LONG_Y1):
        y2 = roles == Y2
        turn = _turn_two_grad(roles, [3.0, 4.0], "turn")
        assert torch.allclose(turn[0][y2[0]], torch.full((2,), -0.75))
        assert torch.allclose(turn[1][y2[1]], torch.full((3,), -4.0 / 6))
        token = _turn_two_grad(roles, [3.0, 4.0], "token")
        assert torch.allclose(token[0][y2[0]], torch.full((2,), -0.6))
        assert torch.allclose(token[1][y2[1]], torch.full((3,), -0.8))
        assert torch.all(turn[roles == Y1] == 0) and torch.all(token[roles == Y1] == 0)
        for loss_type, got in (("turn", turn), ("token", token)):
            alone = _turn_two_grad(NO_Y1, [3.0, 4.0], loss_type)
            assert torch.allclose(got[y2], alone[NO_Y1 == Y2])


def test_turn_norm_needs_the_four_counts():
    assert step_counts(WITH_Y1).tolist() == [2, 5, 2, 5]
    norm = TurnNorm.from_counts(torch.tensor([2, 5, 2, 4]))
    assert (norm.turn1.num_seqs, norm.turn1.num_tokens, norm.turn2.num_tokens, norm.num_tokens) == (2, 5, 4, 9)
    with pytest.raises(ValueError, match="4 counts"):
        TurnNorm.from_counts(torch.tensor([4, 9]))


# ------------------------------------------------------------------------------------------------ D12 critic
def _linear(w1: float, w2: float) -> nn.Linear:
    """A twin head over a one-number feature: ``x -> [w1 x, w2 x]``."""
    lin = nn.Linear(1, 2, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[w1], [w2]]))
    return lin


def test_the_critic_scores_a_batch_before_it_is_fitted_on_it():
    """Q = [x, 2x], V = [0.5x, x] on features s0 = 1, (s0, a1) = 2, s1 = 3, (s1, a2) = 4 (one episode):
    A1 = min Q(2) - min V(1) = 2 - 0.5 = 1.5 and A2 = min Q(4) - min V(3) = 4 - 1.5 = 2.5, from the critic as it
    stood. One SGD step on rewards (1, 1) then moves both heads, and scoring after it would give other numbers."""
    torch.manual_seed(0)
    q, v = _linear(1.0, 2.0), _linear(0.5, 1.0)
    target = make_target(q, v)
    one = torch.ones(1, 1)
    t = Transitions(s0=one, s0a1=2 * one, s1=3 * one, s1a2=4 * one, rew1=torch.ones(1), rew2=torch.ones(1))
    opt_q, opt_v = torch.optim.SGD(q.parameters(), lr=0.01), torch.optim.SGD(v.parameters(), lr=0.01)
    a1, a2, q_sum, v_sum = score_then_fit(q, v, target, opt_q, opt_v, t, updates=1, gamma=1.0, tau=0.5,
                                          global_rows=4)
    assert (a1.tolist(), a2.tolist()) == ([1.5], [2.5])
    # the loss sums are of the critic before its step. Q targets: turn 1, r + V_target(s1) = 1 + [1.5, 3];
    # turn 2, r = 1. Q(2) = [2, 4], Q(4) = [4, 8]: (2 - 2.5)^2 + (4 - 4)^2 + (4 - 1)^2 + (8 - 1)^2 = 58.25.
    # V targets are Q_target at the taken actions: V(1) = [0.5, 1] vs [2, 4], V(3) = [1.5, 3] vs [4, 8]:
    # 2.25 + 9 + 6.25 + 25 = 42.5
    assert (q_sum, v_sum) == (pytest.approx(58.25), pytest.approx(42.5))
    after = critic_advantages(q, v, t)
    assert (after[0].item(), after[1].item()) != (1.5, 2.5)
    with pytest.raises(ValueError, match="critic_updates must be >= 1"):
        score_then_fit(q, v, target, opt_q, opt_v, t, updates=0, gamma=1.0, tau=0.5, global_rows=4)
