"""The batched trading env equals the scalar one: orders, costs, observations, rewards, resets, on real DJI data."""

from pathlib import Path

import numpy as np
import pytest

from distlab.errors import DistlabError
from distlab.recipes.ppo.envs import make_vec_env
from distlab.recipes.ppo.trading import execute_orders, load_market, split_by_date
from distlab.recipes.ppo.trading_vec import VecStockTradingEnv, execute_orders_batch

MARKET = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "market"
needs_data = pytest.mark.skipif(not (MARKET / "DJI_2009_2020.csv").is_file(),
                                reason=f"shared market data absent at {MARKET}: the equality test runs on DJI + SPY")


def test_batched_orders_equal_scalar_orders_bit_for_bit():
    """Many ties, short cash, sells larger than holdings and a zero price: the hard cases of the order book."""
    rng = np.random.default_rng(0)
    e, n = 500, 6
    cash = rng.choice([0.0, 50.0, 500.0, 5000.0], e) + rng.uniform(0, 1, e)
    holdings = rng.integers(0, 8, (e, n)).astype(float)
    prices = rng.uniform(5, 120, (e, n))
    prices[::7, 2] = 0.0
    orders = rng.integers(-10, 11, (e, n)).astype(float)
    got = execute_orders_batch(cash, holdings, prices, orders, 0.001)
    for k in range(e):
        c, h, trade = execute_orders(float(cash[k]), holdings[k], prices[k], orders[k], 0.001)
        assert got[0][k] == c and (got[1][k] == h).all() and (got[2][k] == trade.shares).all()
        assert got[3][k] == trade.cost
    assert (got[2] > 0).any(axis=1).sum() > 100 and (got[2] < 0).any(axis=1).sum() > 100  # both sides traded
    assert np.isclose(got[0], cash).sum() < e // 2                                         # and moved cash


def _assert_infos_equal(a: dict, b: dict, where: str) -> None:
    assert set(a) == set(b), f"{where}: info keys {sorted(a)} != {sorted(b)}"
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, dict):
            _assert_infos_equal(x, y, f"{where}/{key}")
        elif key == "final_obs":
            assert all((u is None and v is None) or np.array_equal(u, v) for u, v in zip(x, y)), f"{where}/{key}"
        elif key == "portfolio_value":  # sums of holdings x prices: equal to rounding
            np.testing.assert_allclose(x, y, rtol=1e-12, err_msg=f"{where}/{key}")
        else:
            assert np.array_equal(x, y), f"{where}/{key}: {x} != {y}"


@needs_data
def test_vector_env_equals_scalar_envs_on_dji():
    market = load_market([str(MARKET / "DJI_2009_2020.csv"), str(MARKET / "SPY_2009_2020.csv")], True)
    period = split_by_date(market, "2015-06-01", "2015-09-15")           # 74 days with the August 2015 sell-off
    threshold = float(np.quantile(period.turbulence, 0.85))
    kw = dict(market=market, start="2015-06-01", end="2015-09-15", window=30, turbulence_threshold=threshold,
              initial_amount=20_000.0)                                      # little cash: buys are often capped
    scalar = make_vec_env("trading", 5, 7, env_impl="scalar", **kw)
    vector = make_vec_env("trading", 5, 7, env_impl="vector", **kw)
    assert vector.unwrapped.__class__ is VecStockTradingEnv and vector.single_observation_space.shape == (30, 13)
    rng = np.random.default_rng(3)
    actions = np.round(rng.uniform(-1.3, 1.3, (200, 5, 2)), 1).astype(np.float32)  # clipped and tied orders too
    out_s, out_v = scalar.reset(seed=7), vector.reset(seed=7)
    days, costs, turbulent_steps, returns, episode_returns = [], [], 0, np.zeros(5), []
    lengths = np.zeros(5, int)
    liquidations = 0
    restarts = {11: [0], 23: [1, 4], 40: [2]}                              # copy 3 runs from day 0
    for t, action in enumerate(actions):
        if t in restarts:  # restart some copies so that they are at different days from then on
            mask = np.isin(np.arange(5), restarts[t])
            out_s, out_v = scalar.reset(options={"reset_mask": mask}), vector.reset(options={"reset_mask": mask})
            assert np.array_equal(out_s[0], out_v[0])
            _assert_infos_equal(out_s[1], out_v[1], f"reset at step {t}")
            returns[mask], lengths[mask] = 0.0, 0
        day = vector.unwrapped._day.copy()
        turbulent = period.turbulence[day] >= threshold
        liquidating = turbulent & (vector.unwrapped._holdings.sum(axis=1) > 0)
        turbulent_steps += int(turbulent.sum())
        out_s, out_v = scalar.step(action), vector.step(action)
        liquidations += int(liquidating.sum())
        assert (vector.unwrapped._holdings[liquidating & (day < 72)] == 0).all()   # sold everything, bought nothing
        obs_s, rew_s, term_s, trunc_s, info_s = out_s
        obs_v, rew_v, term_v, trunc_v, info_v = out_v
        assert obs_v.dtype == np.float32 and np.array_equal(obs_s, obs_v), f"observations differ at step {t}"
        np.testing.assert_allclose(rew_v, rew_s, rtol=1e-9, atol=1e-12, err_msg=f"rewards at step {t}")
        assert np.array_equal(term_s, term_v) and np.array_equal(trunc_s, trunc_v), f"episode ends at step {t}"
        # Gymnasium's SyncVectorEnv consumes options["reset_mask"], so RecordEpisodeStatistics over it zeroes
        # every copy's running return on a partial reset: check the batched env's statistics by hand instead.
        ep_s, ep_v = info_s.pop("episode", None), info_v.pop("episode", None)
        _assert_infos_equal(info_s, info_v, f"step {t}")
        returns += rew_v
        lengths += 1
        if term_v.any():
            np.testing.assert_allclose(ep_v["r"][term_v], returns[term_v], rtol=1e-12)
            assert (ep_v["l"][term_v] == lengths[term_v]).all()
            episode_returns += list(returns[term_v])
            returns[term_v], lengths[term_v] = 0.0, 0
        days.append(day)
        costs.append(info_v.get("final_info", info_v).get("cost", 0.0))
    days = np.array(days)
    assert len(period) == 74 and (days.max(axis=0) == 72).all()           # every copy reached the last trading day
    assert len(set(days[100])) == 4                                        # copies at four different days
    assert len(episode_returns) == 10 and turbulent_steps == 127 and liquidations > 20   # crash rule used often
    assert np.sum(costs) > 0 and np.allclose(vector.return_queue, episode_returns, rtol=1e-12)
    scalar.close()
    vector.close()


def test_env_impl_errors_are_one_line():
    with pytest.raises(DistlabError, match=r"env_impl='fast': choose vector .* or scalar"):
        make_vec_env("trading", 2, 0, env_impl="fast")
    with pytest.raises(DistlabError, match="async_envs=true .* set env_impl=scalar"):
        make_vec_env("trading", 2, 0, asynchronous=True, market=_tiny_market())


def _tiny_market():
    from distlab.recipes.ppo.trading import MarketData
    close = np.array([[10.0], [11.0], [12.0]])
    return MarketData(np.array(["2020-01-01", "2020-01-02", "2020-01-03"]), ["T"], close, np.zeros((3, 1, 4)))
