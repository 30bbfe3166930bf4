"""Backtest a trained policy on a trading period and compare it with buy-and-hold of the same assets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from distlab.atomic import atomic_save_figure, atomic_write_json
from distlab.recipes.ppo.policy import ActorCritic
from distlab.recipes.ppo.trading import StockTradingEnv
from distlab.run.logs import Progress, phase_progress

TRADING_DAYS = 252


def performance(values: np.ndarray) -> dict[str, float]:
    """Cumulative and annualised return, daily Sharpe (annualised by sqrt 252, rf = 0), max drawdown."""
    values = np.asarray(values, dtype=np.float64)
    daily = values[1:] / values[:-1] - 1.0
    cum = values[-1] / values[0] - 1.0
    years = max(len(daily), 1) / TRADING_DAYS
    std = daily.std(ddof=1) if len(daily) > 1 else 0.0
    return {"cumulative_return": float(cum),
            "annual_return": float((1.0 + cum) ** (1.0 / years) - 1.0),
            "sharpe": float(np.sqrt(TRADING_DAYS) * daily.mean() / std) if std > 0 else 0.0,
            "max_drawdown": float((values / np.maximum.accumulate(values) - 1.0).min()),
            "final_value": float(values[-1])}


def buy_and_hold(env: StockTradingEnv) -> np.ndarray:
    """Equal-weight buy on day 0 (whole shares, paying the env's fee), hold to the end."""
    close = env.market.close
    budget = env.initial_amount / env.n
    shares = np.floor(budget / (close[0] * (1.0 + env.cost_pct)))
    cash = env.initial_amount - float(shares @ close[0]) * (1.0 + env.cost_pct)
    return cash + close @ shares


@torch.no_grad()
def run_policy(policy: ActorCritic, env: StockTradingEnv, deterministic: bool = True,
               device: str | torch.device = "cpu", progress: Progress | None = None) -> np.ndarray:
    """Portfolio value on every day of one episode, acting with the policy's mode by default; ``progress``
    counts the days traded (a large policy over five years took minutes, silently)."""
    obs, info = env.reset()
    values = [info["portfolio_value"]]
    state = policy.initial_state(1, device)
    done = torch.ones(1, device=device)
    terminated = truncated = False
    while not (terminated or truncated):
        x = torch.as_tensor(obs, dtype=torch.float32, device=device).unsqueeze(0)
        action, state = policy.act(x, state, done, deterministic)
        obs, _, terminated, truncated, info = env.step(action[0].cpu().numpy())
        values.append(info["portfolio_value"])
        done = torch.zeros(1, device=device)
        if progress is not None:
            progress.advance()
    return np.asarray(values)


def save_equity_plot(path: str | Path, curves: dict[str, tuple[np.ndarray, np.ndarray]],
                     title: str = "Equity curve") -> None:
    """Plot ``{label: (dates, values)}`` to a PNG, written atomically."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for label, (dates, values) in curves.items():
        x = np.asarray(dates, dtype="datetime64[D]") if len(dates) and isinstance(dates[0], str) else dates
        ax.plot(x, values, label=label)
    ax.set_title(title)
    ax.set_ylabel("portfolio value")
    ax.legend()
    fig.autofmt_xdate()
    try:
        atomic_save_figure(fig, path, dpi=100)
    finally:
        plt.close(fig)


def backtest(policy: ActorCritic, env: StockTradingEnv, out_dir: str | Path | None = None,
             deterministic: bool = True, device: str | torch.device = "cpu") -> dict[str, Any]:
    """Metrics of the policy and of buy-and-hold over ``env``'s period; with ``out_dir`` also
    ``backtest.json`` and ``equity.png`` there."""
    was_training = policy.training
    policy.eval()
    try:
        with phase_progress("backtest", max(len(env.market.dates) - 1, 1), "day") as progress:
            agent = run_policy(policy, env, deterministic, device, progress)
    finally:
        policy.train(was_training)
    hold = buy_and_hold(env)
    dates = env.market.dates
    result = {"start": str(dates[0]), "end": str(dates[-1]), "days": len(dates), "tickers": list(env.market.tics),
              "policy": performance(agent), "buy_and_hold": performance(hold)}
    if out_dir is not None:
        out_dir = Path(out_dir)
        atomic_write_json(out_dir / "backtest.json", result)
        save_equity_plot(out_dir / "equity.png", {"policy": (dates, agent), "buy and hold": (dates, hold)})
    return result
