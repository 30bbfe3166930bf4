"""Env-steps/s of the trading env, scalar (one Python env per copy) vs vectorised, alone and inside CLSTM-PPO.

Why: issue 19 item 6 asks CLSTM-PPO on one GPU to reach 5x the 3,824 env-steps/s of 2026-11-22
(``docs/benchmarks.md``, 16 envs, window 30, DJI + SPY 2009-2015). This prints both figures for each
env count so that one run on the GPU machine shows where the loop stands; no internet, under 2 minutes.

    OMP_NUM_THREADS=1 python benchmarks/ppo_env_speed.py                  # GPU if visible, else CPU
    python benchmarks/ppo_env_speed.py --num-envs 16,64,256 --updates 3   # the PPO part: 3 updates per point
    python benchmarks/ppo_env_speed.py --no-ppo                           # env alone only (seconds)
    python benchmarks/ppo_env_speed.py --market-dir DIR                   # where DJI/SPY CSVs are elsewhere

Needs gymnasium and omegaconf importable and distlab's ``src`` on PYTHONPATH (or installed); default
data folder ``../shared/data/market`` from the repository root.

PPO figures leave out the first update (start-up, cuDNN autotuning): env steps of updates 2..N over
their wall time, the way ``sps`` in ``metrics.jsonl`` counts once warm.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from distlab.recipes.ppo.algo import PPOConfig, PPOHooks, train
from distlab.recipes.ppo.envs import make_vec_env
from distlab.recipes.ppo.trading import load_market

MARKET = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "market"
START, END = "2009-01-01", "2016-01-01"


def env_speed(market, impl: str, num_envs: int, window: int, seconds: float) -> float:
    """Env-steps/s of random actions in [-1, 1] for about ``seconds`` (after 5 warm-up steps)."""
    envs = make_vec_env("trading", num_envs, 0, env_impl=impl, market=market, start=START, end=END, window=window)
    envs.reset(seed=0)
    actions = np.random.default_rng(0).uniform(-1, 1, (64, num_envs, envs.single_action_space.shape[0]))
    actions = actions.astype(np.float32)
    for a in actions[:5]:
        envs.step(a)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        envs.step(actions[steps % len(actions)])
        steps += 1
    rate = steps * num_envs / (time.perf_counter() - t0)
    envs.close()
    return rate


class _Clock(PPOHooks):
    def __init__(self) -> None:
        self.marks: list[tuple[float, int]] = []

    def on_update(self, update_idx: int, global_step: int, metrics: dict[str, float]) -> None:
        self.marks.append((time.perf_counter(), global_step))


def ppo_speed(data: str, impl: str, num_envs: int, window: int, updates: int, device: str) -> float:
    """Warm env-steps/s of CLSTM-PPO (the 2026-11-22 benchmark's settings) over ``updates`` updates."""
    cfg = PPOConfig(env_id="trading", policy="clstm", window=window, num_envs=num_envs, num_steps=128,
                    total_timesteps=num_envs * 128 * updates, trading_data=data, trading_start=START,
                    trading_end=END, env_impl=impl, device=device, cudnn_benchmark=device == "cuda")
    clock = _Clock()
    train(cfg, clock)
    (t1, s1), (t2, s2) = clock.marks[0], clock.marks[-1]
    return (s2 - s1) / (t2 - t1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--num-envs", default="16,64", help="comma list of env counts per rank")
    p.add_argument("--window", type=int, default=30)
    p.add_argument("--updates", type=int, default=3, help="PPO updates per point (the first is not timed)")
    p.add_argument("--env-seconds", type=float, default=2.0, help="seconds per env-alone measurement")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--impls", default="scalar,vector")
    p.add_argument("--no-ppo", action="store_true", help="measure the env alone only")
    p.add_argument("--market-dir", type=Path, default=MARKET,
                   help="folder with DJI_2009_2020.csv and SPY_2009_2020.csv")
    args = p.parse_args()
    if args.updates < 2:
        p.error("--updates must be >= 2: the first update is start-up and is not timed")
    files = [args.market_dir / "DJI_2009_2020.csv", args.market_dir / "SPY_2009_2020.csv"]
    missing = [f for f in files if not f.is_file()]
    if missing:
        p.error(f"market data {missing[0]} not found: pass --market-dir with the DJI and SPY CSVs")
    args.data = ",".join(map(str, files))
    market = load_market(args.data)
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"device {device_name}, torch {torch.__version__}, window {args.window}, {START}..{END}")
    rows = []
    for n in [int(x) for x in args.num_envs.split(",")]:
        for impl in args.impls.split(","):
            row = {"impl": impl, "num_envs": n, "env_steps_per_s_env_alone": round(
                env_speed(market, impl, n, args.window, args.env_seconds))}
            if not args.no_ppo:
                row["env_steps_per_s_ppo"] = round(ppo_speed(args.data, impl, n, args.window, args.updates,
                                                             args.device))
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"{'envs':>5} {'impl':>7} {'env alone':>11} {'CLSTM-PPO':>10}")
    for r in rows:
        print(f"{r['num_envs']:>5} {r['impl']:>7} {r['env_steps_per_s_env_alone']:>11,} "
              f"{r.get('env_steps_per_s_ppo', float('nan')):>10,}")


if __name__ == "__main__":
    main()
