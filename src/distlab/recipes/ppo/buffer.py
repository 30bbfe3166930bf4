"""Rollout storage, GAE, and minibatches that keep recurrent sequences whole.

Layout is time-major [T, B, ...]. ``dones[t]`` is 1 when ``obs[t]`` is the first observation of a
new episode (the env reset in the previous step), which is both what the LSTM needs to zero its
state and what GAE needs to stop bootstrapping across episode boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from distlab.errors import DistlabError
from distlab.recipes.ppo.policy import State


@dataclass
class Rollout:
    """One rollout of T steps from B envs, plus the recurrent state the policy had before step 0."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor
    values: torch.Tensor
    initial_state: State = ()

    @classmethod
    def allocate(cls, num_steps: int, num_envs: int, obs_shape: tuple[int, ...], act_shape: tuple[int, ...],
                 act_dtype: torch.dtype, device: torch.device | str) -> "Rollout":
        def z(*shape, dtype=torch.float32):
            return torch.zeros((num_steps, num_envs, *shape), dtype=dtype, device=device)
        return cls(z(*obs_shape), z(*act_shape, dtype=act_dtype), z(), z(), z(), z())


def compute_gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, next_value: torch.Tensor,
                next_done: torch.Tensor, gamma: float, gae_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimates and value targets (returns = advantages + values).

    delta_t = r_t + gamma * V(s_{t+1}) * (1 - done_{t+1}) - V(s_t);
    A_t = delta_t + gamma * lambda * (1 - done_{t+1}) * A_{t+1}.
    """
    num_steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(rewards[0])
    for t in reversed(range(num_steps)):
        if t == num_steps - 1:
            nonterminal, next_v = 1.0 - next_done, next_value
        else:
            nonterminal, next_v = 1.0 - dones[t + 1], values[t + 1]
        delta = rewards[t] + gamma * next_v * nonterminal - values[t]
        last = delta + gamma * gae_lambda * nonterminal * last
        advantages[t] = last
    return advantages, advantages + values


def env_minibatches(num_envs: int, num_minibatches: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Shuffle env indices and split them into equal groups: each minibatch is whole env sequences."""
    if num_envs % num_minibatches:
        raise DistlabError(f"num_envs={num_envs} is not divisible by num_minibatches={num_minibatches}: "
                           "recurrent PPO splits whole env sequences, so pick a divisor of num_envs")
    perm = torch.randperm(num_envs, generator=generator)
    return list(perm.view(num_minibatches, -1))


def sample_minibatches(batch_size: int, num_minibatches: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Shuffle flat sample indices into equal groups (feed-forward policies need no sequences)."""
    if batch_size % num_minibatches:
        raise DistlabError(f"batch of {batch_size} steps is not divisible by num_minibatches={num_minibatches}")
    return list(torch.randperm(batch_size, generator=generator).view(num_minibatches, -1))


@dataclass
class Minibatch:
    """Flattened tensors of a minibatch; for sequences also the envs' initial recurrent state."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    dones: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    initial_state: State


def sequence_minibatch(ro: Rollout, advantages: torch.Tensor, returns: torch.Tensor,
                       env_idx: torch.Tensor) -> Minibatch:
    """All T steps of the envs in ``env_idx``, flattened time-major so the policy can re-split (T, b)."""
    def take(x):
        return x[:, env_idx].reshape(-1, *x.shape[2:])
    state = tuple(s[:, env_idx] for s in ro.initial_state)
    return Minibatch(take(ro.obs), take(ro.actions), take(ro.logprobs), take(ro.dones), take(ro.values),
                     take(advantages), take(returns), state)


def flat_minibatch(ro: Rollout, advantages: torch.Tensor, returns: torch.Tensor, idx: torch.Tensor) -> Minibatch:
    """Arbitrary steps (by flat index over T*B) for a feed-forward policy; no recurrent state."""
    def take(x):
        return x.reshape(-1, *x.shape[2:])[idx]
    return Minibatch(take(ro.obs), take(ro.actions), take(ro.logprobs), take(ro.dones), take(ro.values),
                     take(advantages), take(returns), ())
