"""``distlab backtest RUN_DIR``: load a trained trading policy and trade an out-of-sample period.

Imports only :mod:`distlab.recipes.ppo.config` from the recipe side, so ``recipe.py`` can register this
command without an import cycle; training and plotting modules load when the command runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from omegaconf import OmegaConf

from distlab.errors import DistlabError


def run_backtest(run_dir: Path, start: str, end: str | None, out: Path | None) -> Path:
    from distlab.training.checkpoint import find_checkpoint
    from distlab.recipes.ppo.backtest import backtest
    from distlab.recipes.ppo.config import PPORecipeConfig, to_algo_config
    from distlab.recipes.ppo.policy import build_policy
    from distlab.recipes.ppo.trading import make_trading_env

    cfg_file = run_dir / "config.yaml"
    if not cfg_file.exists():
        raise DistlabError(f"{cfg_file} not found; pass the run directory of a `distlab train ppo env=trading` run")
    try:
        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(PPORecipeConfig), OmegaConf.load(cfg_file)))
    except Exception:  # another recipe's keys, or not YAML at all
        raise DistlabError(f"{run_dir} is not a PPO run (its config.yaml does not fit the ppo recipe); backtests "
                           f"need a `distlab train ppo env=trading` run") from None
    if cfg.env != "trading":
        raise DistlabError(f"{run_dir} trained env={cfg.env}; backtests need env=trading")
    algo = to_algo_config(cfg, "cpu")
    opts = dict(algo.env_options())
    opts.pop("start", None), opts.pop("end", None)
    env = make_trading_env(start=start, end=end, **opts)
    policy = build_policy(algo.policy, env.observation_space, env.action_space, **algo.policy_sizes())
    load_policy_weights(policy, find_checkpoint(run_dir))
    out = out or run_dir / "backtest"
    result = backtest(policy, env, out_dir=out)
    p, h = result["policy"], result["buy_and_hold"]
    print(f"{result['start']}..{result['end']} ({result['days']} days)")
    for name, m in (("policy", p), ("buy and hold", h)):
        print(f"  {name:12s} " + "  ".join(f"{k}={v:.4f}" for k, v in m.items() if isinstance(v, float)))
    return out / "backtest.json"


def load_policy_weights(policy: torch.nn.Module, ckpt: Path) -> None:
    """Read only the policy's weights from a training checkpoint (the core's single-process reader), so
    backtests of runs saved in either checkpoint layout keep working."""
    from distlab.training.checkpoint import load_model_weights

    load_model_weights(policy, ckpt, prefer="policy")


def cmd_backtest(a: argparse.Namespace, extra: list[str]) -> int:
    if extra:
        raise DistlabError(f"unexpected arguments: {' '.join(extra)}")
    out = run_backtest(Path(a.run_dir), a.start, a.end, Path(a.out) if a.out else None)
    print(f"wrote {out}")
    return 0


def register_commands(top, data_sub) -> None:  # noqa: ARG001 (PPO builds no datasets)
    """``distlab backtest``, added to the top-level command list by the ``ppo`` recipe."""
    b = top.add_parser("backtest", help="trade a trained PPO trading policy over a date range vs buy-and-hold")
    b.add_argument("run_dir", help="a trained ppo run with env=trading (its last checkpoint is used)")
    b.add_argument("--start", default="2016-01-01", help="first trading day, ISO date (default 2016-01-01, the "
                   "day the default training range ends)")
    b.add_argument("--end", default=None, help="last trading day, ISO date (default: the data's last day)")
    b.add_argument("--out", default=None, help="folder for the backtest's CSV, JSON and plot (default "
                   "RUN_DIR/backtest)")
    b.set_defaults(func=cmd_backtest)
