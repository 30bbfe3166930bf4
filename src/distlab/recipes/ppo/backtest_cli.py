"""``distlab backtest RUN_DIR``: load a trained trading policy and trade an out-of-sample period."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from distlab.errors import DistlabError


def run_backtest(run_dir: Path, start: str, end: str | None, out: Path | None) -> Path:
    from distlab.evaluate import find_checkpoint
    from distlab.recipes.ppo.backtest import backtest
    from distlab.recipes.ppo.policy import build_policy
    from distlab.recipes.ppo.recipe import PPORecipeConfig, to_algo_config
    from distlab.recipes.ppo.trading import make_trading_env
    import torch.distributed.checkpoint as dcp

    cfg_file = run_dir / "config.yaml"
    if not cfg_file.exists():
        raise DistlabError(f"{cfg_file} not found; pass the run directory of a `distlab train ppo env=trading` run")
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(PPORecipeConfig), OmegaConf.load(cfg_file)))
    if cfg.env != "trading":
        raise DistlabError(f"{run_dir} trained env={cfg.env}; backtests need env=trading")
    algo = to_algo_config(cfg, "cpu")
    opts = dict(algo.env_options())
    opts.pop("start", None), opts.pop("end", None)
    env = make_trading_env(start=start, end=end, **opts)
    policy = build_policy(algo.policy, env.observation_space, env.action_space, **algo.policy_sizes())
    ckpt = find_checkpoint(run_dir)
    state = {"model": policy.state_dict()}
    dcp.load(state, checkpoint_id=str(ckpt))
    policy.load_state_dict(state["model"])
    out = out or run_dir / "backtest"
    result = backtest(policy, env, out_dir=out)
    p, h = result["policy"], result["buy_and_hold"]
    print(f"{result['start']}..{result['end']} ({result['days']} days)")
    for name, m in (("policy", p), ("buy and hold", h)):
        print(f"  {name:12s} " + "  ".join(f"{k}={v:.4f}" for k, v in m.items() if isinstance(v, float)))
    return out / "backtest.json"
