"""Trading env: indicator values, cost arithmetic, turbulence liquidation, real-data loading, backtest."""

import json
from pathlib import Path

import numpy as np
import pytest

from distlab.errors import DistlabError
from distlab.recipes.ppo import indicators as ind
from distlab.recipes.ppo.backtest import backtest, performance
from distlab.recipes.ppo.policy import build_policy
from distlab.recipes.ppo.trading import (MarketData, StockTradingEnv, execute_orders, load_market,
                                         read_ohlcv_csv, split_by_date)

MARKET = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "market"


def test_ema_rsi_cci_adx_match_hand_values():
    close = np.array([10.0, 11.0, 10.5, 12.0])
    # adjusted EMA, span 3 -> alpha 0.5: weights 1, .5, .25, ... renormalised
    assert ind.ema(close, 3)[1] == pytest.approx((11 + 0.5 * 10) / 1.5)
    assert ind.ema(close, 3)[3] == pytest.approx((12 + .5 * 10.5 + .25 * 11 + .125 * 10) / 1.875)
    # RSI window 2 (alpha .5): ups 0,1,0,1.5  downs 0,0,.5,0
    up2 = (0 + .5 * 1 + .25 * 0) / 1.75
    dn2 = (.5 + 0 + 0) / 1.75
    up3 = (1.5 + .5 * 0 + .25 * 1 + .125 * 0) / 1.875
    dn3 = (0 + .5 * .5) / 1.875
    r = ind.rsi(close, 2)
    assert r[0] == 50.0 and r[1] == pytest.approx(100.0)
    assert r[2] == pytest.approx(100 * up2 / (up2 + dn2))
    assert r[3] == pytest.approx(100 * up3 / (up3 + dn3))
    # CCI window 2 on typical prices 10, 12, 11: at t=2 sma=11.5, mad=.5 -> (11-11.5)/(.015*.5)
    high, low = np.array([11.0, 13.0, 12.0]), np.array([9.0, 11.0, 10.0])
    c = ind.cci(high, low, np.array([10.0, 12.0, 11.0]), 2)
    assert c[0] == 0.0
    assert c[1] == pytest.approx((12 - 11) / (0.015 * 1.0))
    assert c[2] == pytest.approx((11 - 11.5) / (0.015 * 0.5))
    # steady uptrend: +DM only, so DX = 0 on day 0 then 100; ADX(2) = wilder average of that
    t = np.arange(5.0)
    a = ind.adx(t + 11, t + 9, t + 10, 2)
    assert a[0] == 0.0
    assert a[1] == pytest.approx(100 * 1 / 1.5)
    assert a[2] == pytest.approx(100 * 1.5 / 1.75)
    assert ind.macd(close)[2] == pytest.approx(ind.ema(close, 12)[2] - ind.ema(close, 26)[2])


def _market(close, turbulence=None):
    close = np.asarray(close, float).reshape(len(close), -1)
    dates = np.array([f"2020-01-{d + 1:02d}" for d in range(len(close))])
    feats = np.zeros((len(close), close.shape[1], 4))
    return MarketData(dates, [f"T{i}" for i in range(close.shape[1])], close, feats,
                      None if turbulence is None else np.asarray(turbulence, float))


def test_transaction_costs_and_reward():
    env = StockTradingEnv(_market([100.0, 110.0, 120.0]), hmax=10, initial_amount=10_000, transaction_cost=0.001,
                          reward_scaling=1.0)
    env.reset()
    _, reward, done, _, info = env.step(np.array([1.0]))       # buy 10 @100, fee 1
    assert info["cost"] == pytest.approx(1.0) and env.holdings[0] == 10
    assert env.cash == pytest.approx(10_000 - 1001)
    assert reward == pytest.approx(8999 + 10 * 110 - 10_000) and not done
    _, reward, done, _, info = env.step(np.array([-1.0]))      # sell 10 @110, fee 1.1
    assert env.cash == pytest.approx(8999 + 1100 * 0.999) and info["cost"] == pytest.approx(1.1)
    assert reward == pytest.approx(-1.1) and done


def test_sells_fund_buys_and_orders_are_capped():
    cash, hold, trade = execute_orders(0.0, np.array([5.0, 0.0]), np.array([100.0, 50.0]), np.array([-8.0, 20.0]), 0.001)
    assert hold[0] == 0                                         # cannot sell more than held
    assert hold[1] == np.floor(499.5 / (50 * 1.001)) == 9       # bought with the sale's proceeds
    assert cash == pytest.approx(499.5 - 9 * 50 * 1.001)
    assert trade.cost == pytest.approx(0.5 + 0.45)


def test_turbulence_forces_liquidation_and_blocks_buys():
    env = StockTradingEnv(_market([[10.0, 20.0]] * 4, turbulence=[0, 9, 0, 0]), hmax=5, initial_amount=1000,
                          reward_scaling=1.0, turbulence_threshold=5.0)
    env.reset()
    env.step(np.array([1.0, 1.0]))
    assert env.holdings.tolist() == [5, 5]
    _, _, _, _, info = env.step(np.array([1.0, 1.0]))          # turbulent day: sell all, buy nothing
    assert env.holdings.tolist() == [0, 0] and info["shares"].tolist() == [-5, -5]
    env.step(np.array([1.0, 1.0]))
    assert env.holdings.tolist() == [5, 5]
    with pytest.raises(DistlabError):
        StockTradingEnv(_market([1.0, 2.0]), turbulence_threshold=1.0)


needs_data = pytest.mark.skipif(not (MARKET / "DJI_2009_2020.csv").is_file(), reason="shared market data absent")


@needs_data
def test_real_data_loads_and_splits_by_date():
    dji = read_ohlcv_csv(MARKET / "DJI_2009_2020.csv")["DJI"]
    assert len(dji.dates) == 2928 and dji.dates[0] == "2009-01-02" and np.isfinite(dji.close).all()  # README says 2,927; the file has 2,928 rows
    spy = read_ohlcv_csv(MARKET / "SPY_2009_2020.csv")["SPY"]
    assert spy.dates[0] == "2009-01-02" and spy.close[0] == pytest.approx(92.96)
    m = load_market([str(MARKET / "DJI_2009_2020.csv"), str(MARKET / "SPY_2009_2020.csv")],
                    str(MARKET / "dow30_turbulence_2009_2020.csv"))
    assert m.tics == ["DJI", "SPY"] and m.close.shape == (len(m), 2) and m.features.shape == (len(m), 2, 4)
    assert np.isfinite(m.features).all() and (m.features[:, :, 1] >= 0).all() and (m.features[:, :, 1] <= 100).all()
    train, trade = split_by_date(m, None, "2016-01-01"), split_by_date(m, "2016-01-01")
    assert train.dates[-1] < "2016-01-01" <= trade.dates[0]
    assert len(train) + len(trade) == len(m) and trade.dates[-1] == m.dates[-1]
    env = StockTradingEnv(trade, window=30, turbulence_threshold=float(np.quantile(train.turbulence, 0.99)))
    obs, _ = env.reset()
    assert obs.shape == (30, 1 + 2 * 2 + 2 * 4)
    assert np.allclose(obs[0], obs[-1])                      # window padded with day 0 at the start
    obs, *_ = env.step(np.array([0.5, 0.5]))
    assert not np.allclose(obs[-1], obs[-2])
    with pytest.raises(DistlabError):
        split_by_date(m, "2030-01-01")


def test_performance_metrics_by_hand():
    v = np.array([100.0, 110.0, 99.0, 121.0])
    p = performance(v)
    daily = np.array([0.1, -0.1, 121 / 99 - 1])
    assert p["cumulative_return"] == pytest.approx(0.21)
    assert p["annual_return"] == pytest.approx(1.21 ** (252 / 3) - 1)
    assert p["sharpe"] == pytest.approx(np.sqrt(252) * daily.mean() / daily.std(ddof=1))
    assert p["max_drawdown"] == pytest.approx(99 / 110 - 1)


def test_backtest_writes_results_and_baseline(tmp_path):
    env = StockTradingEnv(_market([[10.0, 20.0], [11.0, 19.0], [12.0, 18.0], [13.0, 21.0]]), hmax=10,
                          initial_amount=1000, window=2)
    policy = build_policy("clstm", env.observation_space, env.action_space, feat_hidden=8, hidden_size=8)
    res = backtest(policy, env, tmp_path)
    hold = res["buy_and_hold"]
    shares = np.floor(500 / (np.array([10, 20]) * 1.001))   # 49 and 24 shares
    cash = 1000 - (shares @ [10, 20]) * 1.001
    assert hold["final_value"] == pytest.approx(cash + shares @ [13, 21])
    assert res["days"] == 4 and res["policy"]["final_value"] > 0
    assert json.loads((tmp_path / "backtest.json").read_text()) == res
    assert (tmp_path / "equity.png").stat().st_size > 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backtest.json", "equity.png"]   # no temp files left
