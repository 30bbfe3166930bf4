"""The ``ppo`` recipe's config: the core's settings plus every PPO hyperparameter, and its mapping to the algorithm.

Its own module so that both the recipe and ``distlab backtest`` read it without importing each other.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import field

from distlab.config import BaseConfig
from distlab.recipes.ppo.algo import PPOConfig

# Settings the core already owns (seed, device, precision) are taken from run.* and dist.*; every other
# PPO hyperparameter is a top-level key, named as in CleanRL, with the algorithm's own defaults.
_FROM_CORE = {"env_id", "seed", "device", "precision", "tf32", "torch_threads", "cudnn_benchmark"}


# what `distlab train ppo --help` says of each key (the config class is built at run time, so no source comments)
HELP = {
    "env": "any registered Gymnasium id, or trading (the stock-trading env on shared/data/market)",
    "num_episodes": "stop after this many finished episodes over all ranks; 0 = off",
    "cudnn_benchmark": "let cuDNN pick the fastest LSTM/conv kernels (GPU)",
    "policy": "mlp | lstm | clstm (recurrent policies keep their state across steps of an episode)",
    "num_envs": "environment copies per rank, stepped together",
    "num_steps": "steps per copy in each rollout; a rollout is num_envs x num_steps transitions per rank",
    "total_timesteps": "environment steps over all ranks; updates = total / (ranks x num_envs x num_steps)",
    "lr": "Adam learning rate",
    "anneal_lr": "decay the learning rate linearly to 0 over the updates",
    "gamma": "discount factor",
    "gae_lambda": "GAE lambda (1 = Monte-Carlo returns, 0 = one-step TD)",
    "num_minibatches": "minibatches each rollout is split into per epoch",
    "update_epochs": "passes over each rollout",
    "norm_adv": "normalise advantages per minibatch",
    "clip_coef": "PPO ratio clip epsilon",
    "clip_vloss": "clip the value loss like the policy ratio",
    "ent_coef": "entropy bonus weight",
    "vf_coef": "value loss weight",
    "max_grad_norm": "gradient norm clip",
    "target_kl": "stop an update's epochs early once the approximate KL exceeds this; null = off",
    "mask_velocity": "hide velocities from the observation (CartPole-style POMDP that needs a recurrent policy)",
    "async_envs": "step the environment copies in subprocesses (Gymnasium AsyncVectorEnv)",
    "stop_return": "stop once the last-100-episode mean return reaches this; null = off",
    "hidden_size": "policy width; null = the policy kind's default",
    "num_layers": "recurrent layers (lstm, clstm)",
    "enc_size": "clstm: width of the per-step encoder",
    "feat_hidden": "clstm: width of the feature MLP",
    "trading_data": "trading: comma-separated CSVs; null = DJI + SPY from shared/data/market",
    "trading_start": "trading: first training day (ISO date)",
    "trading_end": "trading: day training stops (ISO date); backtests start here by default",
    "hmax": "trading: most shares bought or sold per stock per day",
    "initial_amount": "trading: starting cash",
    "transaction_cost": "trading: fraction of each trade's value paid as cost",
    "reward_scaling": "trading: reward = change of portfolio value x this",
    "turbulence_threshold": "trading: sell everything on days whose turbulence reaches this; null = off",
    "window": "trading: days of features stacked into one observation",
    "env_impl": "trading env: vector (all copies stepped as arrays) | scalar (one env per copy)",
    "env_kwargs": "extra keyword arguments for gymnasium.make",
}


def _recipe_fields() -> list:
    out = [("env", str, field(default="CartPole-v1", metadata={"help": HELP["env"]})),
           ("num_episodes", int, field(default=0, metadata={"help": HELP["num_episodes"]})),
           ("cudnn_benchmark", bool, field(default=True, metadata={"help": HELP["cudnn_benchmark"]}))]
    hints = typing.get_type_hints(PPOConfig)
    for f in dataclasses.fields(PPOConfig):
        if f.name not in _FROM_CORE:
            default = {"default_factory": f.default_factory} if f.default_factory is not dataclasses.MISSING else \
                {"default": f.default}
            out.append((f.name, hints[f.name], field(**default, metadata={"help": HELP.get(f.name, "")})))
    return out


PPORecipeConfig = dataclasses.make_dataclass("PPORecipeConfig", _recipe_fields(), bases=(BaseConfig,))
PPORecipeConfig.__module__ = __name__


def to_algo_config(cfg: PPORecipeConfig, device: str) -> PPOConfig:
    names = {f.name for f in dataclasses.fields(PPOConfig)}
    values = {k: getattr(cfg, k) for k in names if hasattr(cfg, k)}
    values.update(env_id=cfg.env, seed=cfg.run.seed, device=device, tf32=cfg.dist.tf32,
                  precision=str(cfg.dist.precision), env_kwargs=dict(cfg.env_kwargs))
    return PPOConfig(**values)
