"""PPO with feed-forward or recurrent policies, on one process or many (through the core's Runtime).

Read top to bottom: config -> the two PPO collectives -> rollout -> loss -> update -> ``train``.
Recurrent policies are trained on whole environment sequences: the rollout stores the LSTM state
the policy had before its first step, each minibatch takes all T steps of a subset of envs, and the
update replays those sequences from the stored state with the same done-resets as the rollout.

Rank, seeding, TF32, autocast, the any-rank stop flag and the gather of finished episodes come from
the core (:class:`distlab.runtime.dist.Runtime`, :mod:`distlab.training.wrap`). With several ranks, every rank steps
its own envs (seed + 1000 * rank), rank 0's parameters are broadcast at start, and after each
backward pass the gradients of all ranks are averaged with one all-reduce of a single flat buffer.
The policy is called several times per minibatch during recurrent replay, which is why this does
not wrap it in DDP.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from distlab.errors import DistlabError
from distlab.recipes.ppo.buffer import (Minibatch, Rollout, compute_gae, env_minibatches, flat_minibatch,
                                        sample_minibatches, sequence_minibatch)
from distlab.recipes.ppo.envs import check_env_impl, finished_episodes, make_vec_env
from distlab.recipes.ppo.policy import ActorCritic, State, build_policy
from distlab.runtime.dist import Runtime
from distlab.training.amp import MixedPrecision
from distlab.training.wrap import autocast, set_fast_math


@dataclass
class PPOConfig:
    """Everything one PPO run needs; defaults are CleanRL's classic-control settings."""

    env_id: str = "CartPole-v1"
    policy: str = "mlp"  # mlp | lstm | clstm
    num_envs: int = 4
    num_steps: int = 128
    total_timesteps: int = 500_000  # summed over all ranks
    lr: float = 2.5e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    norm_adv: bool = True
    clip_coef: float = 0.2
    clip_vloss: bool = True
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float | None = None
    seed: int = 1
    mask_velocity: bool = False
    async_envs: bool = False
    stop_return: float | None = None  # stop once the last-100-episode mean reaches this
    # policy sizes (None: the kind's default)
    hidden_size: int | None = None
    num_layers: int = 2
    enc_size: int = 64
    feat_hidden: int = 128
    # trading env (env_id == "trading")
    trading_data: str | None = None  # comma-separated CSVs; None = DJI + SPY from shared/data/market
    trading_start: str | None = "2009-01-01"
    trading_end: str | None = "2016-01-01"
    hmax: int = 100
    initial_amount: float = 1e6
    transaction_cost: float = 0.001
    reward_scaling: float = 1e-4
    turbulence_threshold: float | None = None
    window: int = 1
    env_impl: str = "vector"  # trading env: vector (all copies stepped as arrays) | scalar (one env per copy)
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    # hardware
    device: str = "cpu"
    precision: str = "fp32"  # fp32 | bf16 | fp16 (autocast; fp16 with dynamic loss scaling, distlab.training.amp)
    tf32: bool = True
    cudnn_benchmark: bool = False
    torch_threads: int | None = None

    def policy_sizes(self) -> dict[str, int]:
        if self.policy == "mlp":
            return {"hidden_size": self.hidden_size or 64, "num_layers": self.num_layers}
        if self.policy == "lstm":
            return {"hidden_size": self.hidden_size or 128, "enc_size": self.enc_size}
        return {"hidden_size": self.hidden_size or 512, "feat_hidden": self.feat_hidden}

    def env_options(self) -> dict[str, Any]:
        if self.env_id != "trading":
            return dict(self.env_kwargs)
        return {"data": self.trading_data, "start": self.trading_start, "end": self.trading_end,
                "hmax": self.hmax, "initial_amount": self.initial_amount,
                "transaction_cost": self.transaction_cost, "reward_scaling": self.reward_scaling,
                "turbulence_threshold": self.turbulence_threshold, "window": self.window, **self.env_kwargs}


# -- the two collectives PPO owns ------------------------------------------------------------
# Everything else distributed (ranks, seeds, the stop flag, gathering episodes) is the core's Runtime.

def broadcast_parameters(rt: Runtime, module: nn.Module) -> None:
    """Make every rank start from rank 0's weights (ranks seed differently, so their inits differ)."""
    if rt.distributed:
        for p in module.parameters():
            rt.broadcast_(p.data, src=0)


def allreduce_gradients(rt: Runtime, module: nn.Module, extras: torch.Tensor) -> torch.Tensor:
    """Average all gradients and ``extras`` (e.g. approx-KL) over ranks in one flat all-reduce.

    One collective per optimizer step instead of one per parameter tensor: a PPO policy is many
    small tensors, so per-tensor latency would dominate, and riding the KL along in the same buffer
    makes the ``target_kl`` early stop a rank-averaged decision at no extra cost. DDP would bucket
    the same way but cannot be used here (the recurrent replay calls the policy several times per
    backward pass).
    """
    if not rt.distributed:
        return extras
    params = list(module.parameters())
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads] + [extras.to(grads[0].dtype).reshape(-1)])
    buf = rt.all_reduce_sum(flat) / rt.world_size
    offset = 0
    for p, g in zip(params, grads):
        n = g.numel()
        p.grad = buf[offset:offset + n].view_as(p).to(p.dtype).clone()
        offset += n
    return buf[offset:].to(extras.dtype)


def gather_episodes(rt: Runtime, returns: list[float], lengths: list[int]) -> tuple[list[float], list[int]]:
    """All ranks' finished episodes, in rank order (ranks finish different numbers of them)."""
    if not rt.distributed:
        return returns, lengths
    mine = torch.tensor(list(zip(returns, lengths)), dtype=torch.float64).reshape(-1, 2)
    rows = rt.all_gather_ragged(mine)
    return rows[:, 0].tolist(), [int(v) for v in rows[:, 1].tolist()]


# -- run state and hooks ---------------------------------------------------------------------

@dataclass
class PPORun:
    """The training state hooks see: policy, optimizer, minibatch RNG and progress.

    To resume, a hook's ``bind`` restores these in place (the ``ppo`` recipe does it through the
    core's DCP checkpoints). Environments are not checkpointed; a resumed run starts fresh episodes
    (with new seeds) and a zero recurrent state, which PPO tolerates like any episode boundary.
    """

    cfg: PPOConfig
    policy: ActorCritic
    optimizer: torch.optim.Optimizer
    generator: torch.Generator
    update: int = 0
    global_step: int = 0


class PPOHooks:
    """Callbacks of :func:`train`; subclass and override what you need (all are no-ops here).

    ``bind(run)`` is called once before training: keep ``run`` to checkpoint it, and restore its
    policy, optimizer, generator, ``update`` and ``global_step`` right there to resume. ``on_update``
    returning True stops training (on all ranks if on any).
    """

    def bind(self, run: PPORun) -> None:
        pass

    def on_update(self, update_idx: int, global_step: int, metrics: dict[str, float]) -> bool | None:
        return None

    def on_end(self, summary: dict[str, Any]) -> None:
        pass


# -- setup -----------------------------------------------------------------------------------

def check_device(cfg: PPOConfig) -> torch.device:
    device = torch.device(cfg.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DistlabError("device 'cuda' asked for but no GPU is visible: use device=cpu")
    return device


def setup_backends(cfg: PPOConfig, rt: Runtime) -> None:
    """TF32 as the core sets it; cuDNN autotuning and the CPU thread count are PPO's own settings."""
    set_fast_math(rt, cfg.tf32)
    if rt.device.type == "cuda":
        torch.backends.cudnn.benchmark = cfg.cudnn_benchmark
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)


def check_config(cfg: PPOConfig, world: int) -> None:
    if cfg.policy not in ("mlp", "lstm", "clstm"):
        raise DistlabError(f"policy={cfg.policy!r}: choose mlp, lstm or clstm")
    if cfg.num_envs < 1 or cfg.num_steps < 1 or cfg.num_minibatches < 1 or cfg.update_epochs < 1:
        raise DistlabError("num_envs, num_steps, num_minibatches and update_epochs must all be >= 1")
    trading = cfg.env_id == "trading"
    check_env_impl(cfg.env_impl, cfg.async_envs and trading, cfg.mask_velocity and trading)
    if cfg.total_timesteps < cfg.num_envs * cfg.num_steps * world:
        raise DistlabError(f"total_timesteps={cfg.total_timesteps} is less than one rollout "
                           f"({cfg.num_envs}*{cfg.num_steps}*{world} ranks): raise it or shrink the rollout")


def as_tensor(x: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x), dtype=torch.float32, device=device)


# -- rollout ---------------------------------------------------------------------------------

@dataclass
class EnvCursor:
    """Where the envs are between rollouts: last observation, done flags and recurrent state."""

    obs: torch.Tensor
    done: torch.Tensor
    state: State


def collect_rollout(envs: gym.vector.VectorEnv, policy: ActorCritic, cur: EnvCursor, ro: Rollout,
                    autocast: Any) -> tuple[EnvCursor, list[float], list[int]]:
    """Step all envs ``num_steps`` times with the current policy, filling ``ro`` in place."""
    ro.initial_state = tuple(s.clone() for s in cur.state)
    returns: list[float] = []
    lengths: list[int] = []
    box = isinstance(envs.single_action_space, gym.spaces.Box)
    for step in range(ro.obs.shape[0]):
        ro.obs[step], ro.dones[step] = cur.obs, cur.done
        with torch.no_grad(), autocast():
            action, logprob, _, value, state = policy.get_action_and_value(cur.obs, cur.state, cur.done)
        ro.actions[step], ro.logprobs[step], ro.values[step] = action, logprob, value
        env_action = action.cpu().numpy()
        if box:
            env_action = np.clip(env_action, envs.single_action_space.low, envs.single_action_space.high)
        obs, reward, term, trunc, infos = envs.step(env_action)
        ro.rewards[step] = as_tensor(reward, ro.rewards.device)
        cur = EnvCursor(as_tensor(obs, cur.obs.device), as_tensor(np.logical_or(term, trunc), cur.obs.device), state)
        r, n = finished_episodes(infos)
        returns += r
        lengths += n
    return cur, returns, lengths


# -- loss and update -------------------------------------------------------------------------

def ppo_loss(cfg: PPOConfig, mb: Minibatch, newlogprob: torch.Tensor, entropy: torch.Tensor,
             newvalue: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate + (optionally clipped) value loss - entropy bonus."""
    logratio = newlogprob - mb.logprobs
    ratio = logratio.exp()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > cfg.clip_coef).float().mean()
    adv = mb.advantages
    if cfg.norm_adv and adv.numel() > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
    if cfg.clip_vloss:
        v_clipped = mb.values + (newvalue - mb.values).clamp(-cfg.clip_coef, cfg.clip_coef)
        v_loss = 0.5 * torch.max((newvalue - mb.returns) ** 2, (v_clipped - mb.returns) ** 2).mean()
    else:
        v_loss = 0.5 * ((newvalue - mb.returns) ** 2).mean()
    ent = entropy.mean()
    loss = pg_loss - cfg.ent_coef * ent + cfg.vf_coef * v_loss
    return loss, {"policy_loss": pg_loss.detach(), "value_loss": v_loss.detach(), "entropy": ent.detach(),
                  "approx_kl": approx_kl, "clipfrac": clipfrac}


def minibatches(cfg: PPOConfig, policy: ActorCritic, ro: Rollout, adv: torch.Tensor, ret: torch.Tensor,
                generator: torch.Generator) -> list[Minibatch]:
    """Whole env sequences for recurrent policies, shuffled single steps otherwise."""
    num_steps, num_envs = ro.rewards.shape
    if policy.is_recurrent:
        return [sequence_minibatch(ro, adv, ret, idx) for idx in env_minibatches(num_envs, cfg.num_minibatches, generator)]
    return [flat_minibatch(ro, adv, ret, idx)
            for idx in sample_minibatches(num_steps * num_envs, cfg.num_minibatches, generator)]


def ppo_update(cfg: PPOConfig, run: PPORun, ro: Rollout, adv: torch.Tensor, ret: torch.Tensor,
               autocast: Any, rt: Runtime, amp: MixedPrecision | None = None) -> dict[str, float]:
    """Several epochs of minibatch steps; stops early once the rank-averaged KL passes target_kl.

    ``amp`` scales the loss and skips steps with inf/NaN gradients under fp16 (None: plain steps)."""
    policy, optimizer = run.policy, run.optimizer
    amp = amp if amp is not None else MixedPrecision(cfg.precision, rt.device)
    stats: dict[str, list[float]] = {}
    for _ in range(cfg.update_epochs):
        for mb in minibatches(cfg, policy, ro, adv, ret, run.generator):
            with autocast():
                _, newlogprob, entropy, newvalue, _ = policy.get_action_and_value(
                    mb.obs, mb.initial_state, mb.dones, mb.actions)
            loss, parts = ppo_loss(cfg, mb, newlogprob, entropy, newvalue)
            optimizer.zero_grad(set_to_none=False)
            amp.backward(loss)
            approx_kl = allreduce_gradients(rt, policy, parts["approx_kl"].reshape(1)).item()
            amp.step(optimizer, policy, cfg.max_grad_norm)  # all-reduced first: every rank skips alike
            parts["approx_kl"] = torch.tensor(approx_kl)
            for k, v in parts.items():
                stats.setdefault(k, []).append(float(v))
        if cfg.target_kl is not None and approx_kl > cfg.target_kl:
            break
    out = {k: float(np.mean(v)) for k, v in stats.items()}
    values, returns = ro.values.flatten(), ret.flatten()
    var = returns.var()
    out["explained_variance"] = float("nan") if var == 0 else float(1 - (returns - values).var() / var)
    return out


# -- train -----------------------------------------------------------------------------------

def train(cfg: PPOConfig, hooks: PPOHooks | None = None, rt: Runtime | None = None,
          amp: MixedPrecision | None = None) -> dict[str, Any]:
    """Run PPO; returns a summary (last-100-episode mean return, steps, env-steps/s, ...).

    ``rt`` is the core runtime (the ``ppo`` recipe passes its session's); without one, PPO runs on
    whatever process group the caller initialised, or alone. ``amp`` is the loss scaling of
    ``cfg.precision`` (the recipe passes its session's, which checkpoints it); None makes one here.
    """
    hooks = hooks or PPOHooks()
    device = check_device(cfg)
    rt = rt if rt is not None else Runtime.from_process_group(device)
    check_config(cfg, rt.world_size)
    setup_backends(cfg, rt)
    seed = rt.seed_everything(cfg.seed, per_rank=True)  # exploration differs per rank; weights come from rank 0
    env_seed = cfg.seed + 1000 * rt.rank
    envs = make_vec_env(cfg.env_id, cfg.num_envs, env_seed, cfg.async_envs, cfg.mask_velocity,
                        env_impl=cfg.env_impl, **cfg.env_options())
    try:
        policy = build_policy(cfg.policy, envs.single_observation_space, envs.single_action_space,
                              **cfg.policy_sizes()).to(device)
        broadcast_parameters(rt, policy)
        optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr, eps=1e-5, foreach=True)
        generator = torch.Generator().manual_seed(seed)
        run = PPORun(cfg, policy, optimizer, generator)
        hooks.bind(run)
        amp = amp if amp is not None else MixedPrecision(cfg.precision, device)
        summary = _train_loop(cfg, run, envs, hooks, rt, device, env_seed, amp)
    finally:
        envs.close()
    hooks.on_end(summary)
    return summary


def _train_loop(cfg: PPOConfig, run: PPORun, envs: gym.vector.VectorEnv, hooks: PPOHooks, rt: Runtime,
                device: torch.device, env_seed: int, scaling: MixedPrecision) -> dict[str, Any]:
    policy = run.policy
    amp = functools.partial(autocast, rt, cfg.precision)
    steps_per_update = cfg.num_envs * cfg.num_steps * rt.world_size
    num_updates = cfg.total_timesteps // steps_per_update
    start_update = run.update
    obs, _ = envs.reset(seed=env_seed + 1_000_003 * start_update)
    cur = EnvCursor(as_tensor(obs, device), torch.zeros(cfg.num_envs, device=device),
                    policy.initial_state(cfg.num_envs, device))
    act_space = envs.single_action_space
    act_shape = act_space.shape if isinstance(act_space, gym.spaces.Box) else ()
    act_dtype = torch.float32 if isinstance(act_space, gym.spaces.Box) else torch.long
    ro = Rollout.allocate(cfg.num_steps, cfg.num_envs, envs.single_observation_space.shape, act_shape,
                          act_dtype, device)
    recent: deque[float] = deque(maxlen=100)
    episodes_total = 0
    solved_at = None
    t0 = time.perf_counter()
    steps_at_start = run.global_step
    for update in range(start_update + 1, num_updates + 1):
        if cfg.anneal_lr:
            run.optimizer.param_groups[0]["lr"] = cfg.lr * (1.0 - (update - 1.0) / num_updates)
        policy.eval()
        cur, rets, lens = collect_rollout(envs, policy, cur, ro, amp)
        local_eps = len(rets)
        rets, lens = gather_episodes(rt, rets, lens)
        recent.extend(rets)
        episodes_total += len(rets)
        run.global_step += steps_per_update
        with torch.no_grad(), amp():
            next_value = policy.get_value(cur.obs, cur.state, cur.done)
        adv, ret = compute_gae(ro.rewards, ro.values, ro.dones, next_value, cur.done, cfg.gamma, cfg.gae_lambda)
        policy.train()
        metrics = ppo_update(cfg, run, ro, adv, ret, amp, rt, scaling)
        run.update = update
        mean100 = float(np.mean(recent)) if recent else float("nan")
        if solved_at is None and cfg.stop_return is not None and len(recent) == 100 and mean100 >= cfg.stop_return:
            solved_at = run.global_step
        elapsed = time.perf_counter() - t0
        metrics.update(lr=run.optimizer.param_groups[0]["lr"], episodes=len(rets), episodes_local=local_eps,
                       episodic_return=float(np.mean(rets)) if rets else float("nan"),
                       episodic_length=float(np.mean(lens)) if lens else float("nan"),
                       mean_return_100=mean100, sps=(run.global_step - steps_at_start) / max(elapsed, 1e-9))
        stop = bool(hooks.on_update(update, run.global_step, metrics)) or solved_at is not None
        if rt.any_flags(stop)[0]:
            break
    elapsed = time.perf_counter() - t0
    return {"mean_return_100": float(np.mean(recent)) if recent else float("nan"), "episodes": episodes_total,
            "global_step": run.global_step, "updates": run.update, "solved_at_step": solved_at,
            "sps": (run.global_step - steps_at_start) / max(elapsed, 1e-9), "seconds": elapsed,
            "world_size": rt.world_size}
