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


def _recipe_fields() -> list:
    out = [("env", str, field(default="CartPole-v1")),  # any registered Gymnasium id, or "trading"
           ("num_episodes", int, field(default=0)),  # stop after this many finished episodes (all ranks); 0 = off
           ("cudnn_benchmark", bool, field(default=True))]
    hints = typing.get_type_hints(PPOConfig)
    for f in dataclasses.fields(PPOConfig):
        if f.name not in _FROM_CORE:
            default = {"default_factory": f.default_factory} if f.default_factory is not dataclasses.MISSING else \
                {"default": f.default}
            out.append((f.name, hints[f.name], field(**default)))
    return out


PPORecipeConfig = dataclasses.make_dataclass("PPORecipeConfig", _recipe_fields(), bases=(BaseConfig,))
PPORecipeConfig.__module__ = __name__


def to_algo_config(cfg: PPORecipeConfig, device: str) -> PPOConfig:
    names = {f.name for f in dataclasses.fields(PPOConfig)}
    values = {k: getattr(cfg, k) for k in names if hasattr(cfg, k)}
    values.update(env_id=cfg.env, seed=cfg.run.seed, device=device, tf32=cfg.dist.tf32,
                  precision=getattr(cfg.dist.precision, "value", cfg.dist.precision), env_kwargs=dict(cfg.env_kwargs))
    return PPOConfig(**values)
