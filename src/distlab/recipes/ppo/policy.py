"""Actor-critic policies for PPO: feed-forward (``mlp``), recurrent (``lstm``), cascaded (``clstm``).

All three share one calling convention so the rollout and the update never branch on the kind:
``obs`` is [N, *obs_shape] with N = T * B in time-major order (T steps of B environments), ``done``
is [N] and marks observations that start a new episode, and ``state`` is the recurrent state of
the B environments before the first of the T steps. The LSTM state is multiplied by ``1 - done``
before each step, so replaying a stored sequence from its stored initial state reproduces exactly
what the rollout computed.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Normal

from distlab.errors import DistlabError

State = tuple[torch.Tensor, ...]


def layer_init(layer: nn.Module, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Module:
    """Orthogonal weights, constant bias: the PPO-implementation-details default."""
    for name, p in layer.named_parameters():
        if "weight" in name:
            nn.init.orthogonal_(p, std)
        elif "bias" in name:
            nn.init.constant_(p, bias)
    return layer


class ActionHead(nn.Module):
    """Calling it returns the action distribution. Categorical logits for Discrete spaces; Gaussian mean with a learned, state-independent log-std for Box."""

    def __init__(self, in_dim: int, act_space: gym.Space):
        super().__init__()
        if isinstance(act_space, gym.spaces.Discrete):
            self.continuous = False
            self.out = layer_init(nn.Linear(in_dim, int(act_space.n)), std=0.01)
        elif isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
            self.continuous = True
            self.out = layer_init(nn.Linear(in_dim, act_space.shape[0]), std=0.01)
            self.log_std = nn.Parameter(torch.zeros(act_space.shape[0]))
        else:
            raise DistlabError(f"unsupported action space {act_space}: PPO here handles Discrete and 1-D Box")

    def forward(self, x: torch.Tensor) -> torch.distributions.Distribution:
        out = self.out(x).float()  # distributions in fp32 even under bf16 autocast
        if self.continuous:
            return Normal(out, self.log_std.exp().expand_as(out), validate_args=False)
        return Categorical(logits=out, validate_args=False)

    def log_prob_entropy(self, dist, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.continuous:
            return dist.log_prob(action).sum(-1), dist.entropy().sum(-1)
        return dist.log_prob(action), dist.entropy()

    def mode(self, dist) -> torch.Tensor:
        return dist.mean if self.continuous else dist.probs.argmax(-1)


def run_lstm(lstm: nn.LSTM, x: torch.Tensor, state: State, done: torch.Tensor) -> tuple[torch.Tensor, State]:
    """Run ``lstm`` over time-major x [T*B, D], zeroing the state of env b where done[t, b] = 1.

    The sequence is cut only at steps where some env resets, and each piece runs as one LSTM
    call: the same arithmetic as a step-by-step loop, far fewer kernel launches.
    """
    h, c = state
    batch = h.shape[1]
    x = x.reshape(-1, batch, x.shape[-1])
    done = done.reshape(-1, batch).to(x.dtype)
    cuts = [0] + [t for t in range(1, len(done)) if bool(done[t].any())] + [len(done)]
    outs = []
    for t0, t1 in zip(cuts[:-1], cuts[1:]):
        keep = (1.0 - done[t0]).view(1, -1, 1)
        out, (h, c) = lstm(x[t0:t1], (h * keep.to(h.dtype), c * keep.to(c.dtype)))
        outs.append(out)
    return torch.cat(outs).reshape(-1, h.shape[-1]), (h, c)


class ActorCritic(nn.Module, ABC):
    """Shared API; subclasses implement ``features`` -> (actor features, critic features, new state)."""

    is_recurrent = False

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> State:
        return ()

    @abstractmethod
    def features(self, obs: torch.Tensor, state: State, done: torch.Tensor):
        """(actor features, critic features, new recurrent state) for a batch of observations."""

    def get_value(self, obs: torch.Tensor, state: State, done: torch.Tensor) -> torch.Tensor:
        _, critic, _ = self.features(obs, state, done)
        return self.critic(critic).float().squeeze(-1)

    def get_action_and_value(self, obs: torch.Tensor, state: State, done: torch.Tensor,
                             action: torch.Tensor | None = None):
        """(action, logprob, entropy, value, new_state); samples an action unless one is given."""
        actor, critic, new_state = self.features(obs, state, done)
        dist = self.actor(actor)
        if action is None:
            action = dist.sample()
        logprob, entropy = self.actor.log_prob_entropy(dist, action)
        return action, logprob, entropy, self.critic(critic).float().squeeze(-1), new_state

    def act(self, obs: torch.Tensor, state: State, done: torch.Tensor, deterministic: bool = True):
        """Action for evaluation/backtests: the distribution's mode unless ``deterministic`` is False."""
        actor, _, new_state = self.features(obs, state, done)
        dist = self.actor(actor)
        return (self.actor.mode(dist) if deterministic else dist.sample()), new_state


def _mlp(in_dim: int, hidden: int, layers: int) -> nn.Sequential:
    mods: list[nn.Module] = []
    for i in range(layers):
        mods += [layer_init(nn.Linear(in_dim if i == 0 else hidden, hidden)), nn.Tanh()]
    return nn.Sequential(*mods)


class MLPPolicy(ActorCritic):
    """Separate tanh MLPs for actor and critic (CleanRL's classic-control agent)."""

    def __init__(self, obs_dim: int, act_space: gym.Space, hidden_size: int = 64, num_layers: int = 2):
        super().__init__()
        self.actor_body = _mlp(obs_dim, hidden_size, num_layers)
        self.critic_body = _mlp(obs_dim, hidden_size, num_layers)
        self.actor = ActionHead(hidden_size, act_space)
        self.critic = layer_init(nn.Linear(hidden_size, 1), std=1.0)

    def features(self, obs, state, done):
        x = obs.flatten(1)
        return self.actor_body(x), self.critic_body(x), state


class LSTMPolicy(ActorCritic):
    """Encoder -> LSTM -> heads, with separate actor and critic towers by default.

    A shared LSTM lets the value loss (returns of tens to hundreds) dominate the recurrent
    weights and starves the policy gradient; separate towers (SB3-contrib's default) learn
    memory tasks several times faster. ``shared=True`` gives CleanRL's single-tower layout.
    State: (h, c) per tower, each [1, B, hidden].
    """

    is_recurrent = True

    def __init__(self, obs_dim: int, act_space: gym.Space, enc_size: int = 64, hidden_size: int = 128,
                 shared: bool = False):
        super().__init__()
        self.shared = shared
        towers = 1 if shared else 2
        self.encoders = nn.ModuleList(nn.Sequential(layer_init(nn.Linear(obs_dim, enc_size)), nn.Tanh())
                                      for _ in range(towers))
        self.lstms = nn.ModuleList(layer_init(nn.LSTM(enc_size, hidden_size), std=1.0) for _ in range(towers))
        self.actor = ActionHead(hidden_size, act_space)
        self.critic = layer_init(nn.Linear(hidden_size, 1), std=1.0)

    def initial_state(self, batch, device="cpu"):
        return tuple(torch.zeros(1, batch, self.lstms[0].hidden_size, device=device)
                     for _ in range(2 * len(self.lstms)))

    def features(self, obs, state, done):
        x = obs.flatten(1)
        outs, new_state = [], ()
        for i, (enc, lstm) in enumerate(zip(self.encoders, self.lstms)):
            out, hc = run_lstm(lstm, enc(x), state[2 * i:2 * i + 2], done)
            outs.append(out)
            new_state += hc
        return outs[0], outs[-1], new_state


class CLSTMPolicy(ActorCritic):
    """Cascaded LSTM (Zou et al. 2024): a window LSTM summarises the last W days, a recurrent LSTM carries memory.

    The window extractor starts from zeros on every step (it only sees the window), while the
    actor-critic LSTM carries its state across steps like :class:`LSTMPolicy`.
    """

    is_recurrent = True

    def __init__(self, obs_shape: tuple[int, ...], act_space: gym.Space, feat_hidden: int = 128,
                 hidden_size: int = 512):
        super().__init__()
        self.feat_dim = obs_shape[-1]
        self.extractor = layer_init(nn.LSTM(self.feat_dim, feat_hidden, batch_first=True), std=1.0)
        self.lstm = layer_init(nn.LSTM(feat_hidden, hidden_size), std=1.0)
        self.actor = ActionHead(hidden_size, act_space)
        self.critic = layer_init(nn.Linear(hidden_size, 1), std=1.0)

    def initial_state(self, batch, device="cpu"):
        z = torch.zeros(1, batch, self.lstm.hidden_size, device=device)
        return (z, z.clone())

    def features(self, obs, state, done):
        window = obs.reshape(obs.shape[0], -1, self.feat_dim)
        _, (h_feat, _) = self.extractor(window)
        out, new_state = run_lstm(self.lstm, h_feat[-1], state, done)
        return out, out, new_state


_SIZES = {"mlp": {"hidden_size", "num_layers"}, "lstm": {"enc_size", "hidden_size", "shared"},
          "clstm": {"feat_hidden", "hidden_size"}}


def build_policy(kind: str, obs_space: gym.Space, act_space: gym.Space, **sizes: int) -> ActorCritic:
    """Make a policy of ``kind``; ``sizes`` are that kind's layer widths (see ``_SIZES``)."""
    if kind not in _SIZES:
        raise DistlabError(f"unknown policy {kind!r}: choose one of {sorted(_SIZES)}")
    unknown = set(sizes) - _SIZES[kind]
    if unknown:
        raise DistlabError(f"policy {kind!r} has no size {sorted(unknown)}: it takes {sorted(_SIZES[kind])}")
    if not isinstance(obs_space, gym.spaces.Box):
        raise DistlabError(f"observation space {obs_space} is not a Box: flatten it with a Gymnasium wrapper")
    obs_dim = int(np.prod(obs_space.shape))
    if kind == "mlp":
        return MLPPolicy(obs_dim, act_space, **sizes)
    if kind == "lstm":
        return LSTMPolicy(obs_dim, act_space, **sizes)
    return CLSTMPolicy(tuple(obs_space.shape), act_space, **sizes)
