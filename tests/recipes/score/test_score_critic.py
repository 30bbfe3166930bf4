"""The utterance-level critic on a two-step problem with known values, and its target's soft updates (no LM)."""

import copy

import pytest
import torch

from distlab.recipes.score.critic import (Transitions, TwinHead, critic_advantages, critic_step, make_target,
                                          soft_update_target)

GAMMA = 0.9
P_A1 = torch.tensor([0.3, 0.7])  # behaviour policy at s0 over actions a1 in {0, 1}
P_A2 = torch.tensor([[0.5, 0.5], [0.2, 0.8]])  # at s1 = s1(a1), over a2 in {0, 1}
REW1 = torch.tensor([0.0, 0.5])  # reward of a1
REW2 = torch.tensor([[1.0, 0.0], [0.0, 2.0]])  # reward of a2 in s1(a1)
DIM = 12  # one-hot features: s0 | (s0,a1) x2 | s1 x2 | (s1,a2) x4 | 3 unused


def true_values():
    q2 = REW2  # turn 2 is terminal
    v1 = (P_A2 * q2).sum(1)
    q1 = REW1 + GAMMA * v1
    v0 = (P_A1 * q1).sum()
    return q1, v0, q2, v1


def one_hot(idx: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.one_hot(idx, DIM).float()


def sample(n: int, g: torch.Generator) -> Transitions:
    a1 = torch.multinomial(P_A1, n, replacement=True, generator=g)
    a2 = torch.multinomial(P_A2[a1], 1, generator=g).squeeze(1)
    return Transitions(s0=one_hot(torch.zeros(n, dtype=torch.long)), s0a1=one_hot(1 + a1), s1=one_hot(3 + a1),
                       s1a2=one_hot(5 + 2 * a1 + a2), rew1=REW1[a1], rew2=REW2[a1, a2])


@pytest.fixture
def one_thread():
    """Tiny matrices: threads only add contention on a shared machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_td_targets_converge_to_the_known_values(one_thread):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    q, v = TwinHead(DIM, 32), TwinHead(DIM, 32)
    target = make_target(q, v)
    opt_q, opt_v = torch.optim.Adam(q.parameters(), lr=1e-2), torch.optim.Adam(v.parameters(), lr=1e-2)
    for i in range(600):
        if i == 400:  # a smaller step at the end averages out the sampled V targets
            for opt in (opt_q, opt_v):
                opt.param_groups[0]["lr"] = 1e-3
        t = sample(256, g)
        critic_step(q, v, target, opt_q, opt_v, t, gamma=GAMMA, tau=0.1, global_rows=4 * len(t))
    q1, v0, q2, v1 = true_values()
    with torch.no_grad():
        got_q1 = q(one_hot(torch.tensor([1, 2])))  # [a1, head]
        got_q2 = q(one_hot(torch.tensor([5, 6, 7, 8]))).reshape(2, 2, 2)  # [a1, a2, head]
        got_v0 = v(one_hot(torch.tensor([0])))[0]
        got_v1 = v(one_hot(torch.tensor([3, 4])))
    for head in range(2):  # each twin converges on its own
        torch.testing.assert_close(got_q2[..., head], q2, atol=0.05, rtol=0)
        torch.testing.assert_close(got_v1[:, head], v1, atol=0.06, rtol=0)
        torch.testing.assert_close(got_q1[:, head], q1, atol=0.06, rtol=0)
        assert abs(float(got_v0[head]) - float(v0)) < 0.06
    # the advantage of each action is Q - V under the behaviour policy
    t = Transitions(s0=one_hot(torch.tensor([0, 0])), s0a1=one_hot(torch.tensor([1, 2])), s1=one_hot(torch.tensor([3, 4])),
                    s1a2=one_hot(torch.tensor([5, 8])), rew1=torch.zeros(2), rew2=torch.zeros(2))
    a1, a2 = critic_advantages(q, v, t)
    torch.testing.assert_close(a1, q1 - v0, atol=0.1, rtol=0)
    torch.testing.assert_close(a2, torch.stack([q2[0, 0] - v1[0], q2[1, 1] - v1[1]]), atol=0.1, rtol=0)


def _flat(m):
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


@pytest.mark.parametrize("tau", [0.0, 1.0, 0.3])
def test_critic_step_soft_updates_the_target(tau):
    torch.manual_seed(0)
    q, v = TwinHead(DIM, 8), TwinHead(DIM, 8)
    target = make_target(q, v)
    for p in target.parameters():  # start the target away from the critic so every case is visible
        p.data.add_(0.5)
    before = copy.deepcopy(target)
    opt_q, opt_v = torch.optim.SGD(q.parameters(), lr=0.1), torch.optim.SGD(v.parameters(), lr=0.1)
    critic_step(q, v, target, opt_q, opt_v, sample(8, torch.Generator().manual_seed(0)), gamma=GAMMA, tau=tau,
                global_rows=32)
    for key, critic in (("q", q), ("v", v)):
        want = (1 - tau) * _flat(before[key]) + tau * _flat(critic)  # the critic *after* its gradient step
        torch.testing.assert_close(_flat(target[key]), want, rtol=0, atol=1e-6)
    if tau == 0.0:
        assert torch.equal(_flat(target), _flat(before))
    if tau == 1.0:
        assert torch.equal(_flat(target["q"]), _flat(q)) and torch.equal(_flat(target["v"]), _flat(v))
    assert not any(p.requires_grad for p in target.parameters())


def test_target_is_a_separate_copy():
    q, v = TwinHead(DIM, 8), TwinHead(DIM, 8)
    target = make_target(q, v)
    assert torch.equal(_flat(target["q"]), _flat(q))
    with torch.no_grad():
        next(q.parameters()).add_(1.0)
    assert not torch.equal(_flat(target["q"]), _flat(q))  # no shared storage
    soft_update_target(target, q, v, 1.0)
    assert torch.equal(_flat(target["q"]), _flat(q))
