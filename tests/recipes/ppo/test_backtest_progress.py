"""A backtest that takes long says how far it is (days traded, rate, ETA); a quick one prints nothing."""

import time

import numpy as np

from distlab.recipes.ppo.backtest import backtest
from distlab.recipes.ppo.policy import build_policy
from distlab.recipes.ppo.trading import MarketData, StockTradingEnv

DAYS = 60


def _env(days: int) -> StockTradingEnv:
    close = (100.0 + np.arange(days, dtype=float)).reshape(days, 1)
    dates = np.array([str(np.datetime64("2020-01-01") + d) for d in range(days)])
    market = MarketData(dates, ["T0"], close, np.zeros((days, 1, 4)), None)
    return StockTradingEnv(market, hmax=10, initial_amount=1000, window=2)


def _slow(policy, delay: float):
    act = policy.act

    def slow_act(*a, **kw):
        time.sleep(delay)
        return act(*a, **kw)

    policy.act = slow_act
    return policy


def test_a_slow_backtest_prints_days_rate_and_eta(capsys):
    env = _env(DAYS)
    policy = _slow(build_policy("clstm", env.observation_space, env.action_space, feat_hidden=8, hidden_size=8), 0.08)
    backtest(policy, env)  # about 5 s: over the 3 s a phase stays quiet
    lines = [x for x in capsys.readouterr().err.splitlines() if "backtest: day" in x]
    assert lines, "no progress line"
    assert lines[-1].split("  ")[0].endswith(f"day {DAYS - 1}/{DAYS - 1}")
    assert "day/s" in lines[0] and "eta " in lines[0]


def test_a_quick_backtest_prints_nothing(capsys):
    env = _env(8)
    backtest(build_policy("clstm", env.observation_space, env.action_space, feat_hidden=8, hidden_size=8), env)
    assert "backtest" not in capsys.readouterr().err
