"""The trading environment batched: all E copies of a rank stepped with one set of numpy array operations.

:class:`~distlab.recipes.ppo.trading.StockTradingEnv` steps one portfolio per Python call; with a 30-day
window and 16-64 copies the rollout spends most of its time there. This env keeps the copies' state as
arrays (cash [E], holdings [E, n], day [E], observation window [E, W, F]) and steps them together, with
the same arithmetic in the same order as the scalar env, so states, observations, costs and episode
boundaries are bit-identical and rewards equal to rounding (tests/recipes/ppo/test_trading_vec.py checks it).

It is a Gymnasium :class:`~gymnasium.vector.VectorEnv` with same-step autoreset, ``final_obs`` /
``final_info`` and ``reset_mask`` exactly as :class:`~gymnasium.vector.SyncVectorEnv` gives them, so the
PPO rollout and ``RecordEpisodeStatistics`` use it unchanged. Numpy rather than torch: with tens to
hundreds of copies a step is a few dozen tiny array operations, where numpy's ~1 us per call beats a
CUDA kernel launch, and the observation batch the policy needs per step is only E x W x F floats.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

from distlab.errors import DistlabError
from distlab.recipes.ppo.trading import MarketData, check_env_params

INDICATOR_SCALE = 0.01  # the scalar env's scaling of RSI, CCI and ADX in scaled observations


def execute_orders_batch(cash: np.ndarray, holdings: np.ndarray, prices: np.ndarray, orders: np.ndarray,
                         cost_pct: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`~distlab.recipes.ppo.trading.execute_orders` for E portfolios at once.

    Returns (cash [E], holdings [E, n], shares traded [E, n], fees [E]), bit-identical to the scalar
    function: assets are visited in its order (sells most-negative first, then buys largest first,
    ties by asset index) and cash and fees are summed in that order. Sells do not depend on each
    other, so they are one array operation (their cash summed left to right by ``cumsum``); each buy is
    capped by the cash the earlier buys left, so buys loop over the n asset ranks, each step [E] wide.
    """
    rows = np.arange(len(cash))[:, None]
    sell_rank = np.argsort(orders, axis=1, kind="stable")
    order, held, price = orders[rows, sell_rank], holdings[rows, sell_rank], prices[rows, sell_rank]
    n = np.minimum(-order, held)
    sold = np.where((order < 0) & (n > 0), n, 0.0)
    value = price * sold  # adding a 0.0 leaves a sum unchanged, so unsold assets can take part
    cash = np.cumsum(np.concatenate([cash[:, None], value * (1.0 - cost_pct)], 1), axis=1)[:, -1]
    traded = np.zeros_like(holdings)
    traded[rows, sell_rank] = -sold
    fees = [np.zeros_like(cash), *(value * cost_pct).T]

    buy_rank = np.argsort(-orders, axis=1, kind="stable")
    order, price = orders[rows, buy_rank], prices[rows, buy_rank]
    bought = np.zeros_like(order)
    for k in range(order.shape[1]):
        with np.errstate(divide="ignore", invalid="ignore"):
            n = np.minimum(order[:, k], np.floor(cash / (price[:, k] * (1.0 + cost_pct))))
        n = np.where((order[:, k] > 0) & (price[:, k] > 0) & (n > 0), n, 0.0)
        value = price[:, k] * n
        cash = cash - value * (1.0 + cost_pct)
        fees.append(value * cost_pct)
        bought[:, k] = n
    traded[rows, buy_rank] += bought  # an asset is bought or sold, never both
    fees = np.cumsum(np.stack(fees, 1), axis=1)[:, -1]
    return cash, holdings + traded, traded, fees


def _info_dict(values: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    """Gymnasium's vector-info layout: every key with a ``_key`` mask of the envs that report it."""
    out: dict[str, np.ndarray] = {}
    everyone = mask.all()
    for key, value in values.items():
        out[key] = value if everyone else np.where(mask.reshape(-1, *[1] * (value.ndim - 1)), value, 0).astype(
            value.dtype)
        out[f"_{key}"] = mask.copy()
    return out


class VecStockTradingEnv(gym.vector.VectorEnv):
    """``num_envs`` copies of :class:`~distlab.recipes.ppo.trading.StockTradingEnv` over one market.

    Same parameters and observation as the scalar env. Each copy has its own day, so copies may be at
    different points of their episodes (``reset(options={"reset_mask": ...})`` resets some of them).
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP} if hasattr(gym.vector, "AutoresetMode") \
        else {}

    def __init__(self, market: MarketData, num_envs: int, hmax: int = 100, initial_amount: float = 1e6,
                 transaction_cost: float = 0.001, reward_scaling: float = 1e-4,
                 turbulence_threshold: float | None = None, window: int = 1, scale_obs: bool = True):
        check_env_params(market, hmax, initial_amount, transaction_cost, window, turbulence_threshold)
        if num_envs < 1:
            raise DistlabError(f"num_envs={num_envs}: need at least one environment")
        self.market = market
        self.num_envs = num_envs
        self.n = len(market.tics)
        self.hmax = hmax
        self.initial_amount = float(initial_amount)
        self.cost_pct = transaction_cost
        self.reward_scaling = reward_scaling
        self.window = window
        self.state_dim = 1 + 2 * self.n + self.n * market.features.shape[2]
        shape = (self.state_dim,) if window == 1 else (window, self.state_dim)
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, shape, np.float32)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (self.n,), np.float32)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._close_obs, self._feat_obs = self._market_observations(market, scale_obs)
        self._obs_scale = (self.initial_amount, float(hmax)) if scale_obs else (1.0, 1.0)
        self._last_day = len(market) - 1
        self._turbulent = (np.zeros(len(market), bool) if turbulence_threshold is None
                           else market.turbulence >= turbulence_threshold)
        self._day = np.zeros(num_envs, np.int64)
        self._cash = np.full(num_envs, self.initial_amount)
        self._holdings = np.zeros((num_envs, self.n))
        self._obs = np.zeros((num_envs, *shape), np.float32)

    @staticmethod
    def _market_observations(market: MarketData, scale_obs: bool) -> tuple[np.ndarray, np.ndarray]:
        """Price and indicator parts of every day's observation, float64 [T, n] and [T, 4n], computed once."""
        close, feats = market.close, market.features
        if not scale_obs:
            return close, feats.reshape(len(market), -1)
        feats = feats.copy()
        feats[:, :, 0] = feats[:, :, 0] / close
        feats[:, :, 1:] *= INDICATOR_SCALE
        return close / market.close[0], feats.reshape(len(market), -1)

    # -- state -------------------------------------------------------------------------------
    def portfolio_values(self) -> np.ndarray:
        """Cash + holdings at today's close, per copy [E]."""
        return self._cash + np.einsum("en,en->e", self._holdings, self.market.close[self._day])

    def _day_states(self, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """Today's [cash, prices, holdings, indicators] of the copies in ``rows``, float32 [e, F]."""
        day = self._day[rows]
        cash_scale, hold_scale = self._obs_scale
        parts = [(self._cash[rows] / cash_scale)[:, None], self._close_obs[day], self._holdings[rows] / hold_scale,
                 self._feat_obs[day]]
        return np.concatenate(parts, axis=1).astype(np.float32)

    def _push_window(self, states: np.ndarray) -> None:
        """Append today's states to each copy's window, dropping the oldest day (a fresh array, never in place)."""
        if self.window == 1:
            self._obs = states
        else:
            self._obs = np.concatenate([self._obs[:, 1:], states[:, None]], axis=1)

    def _restart(self, mask: np.ndarray) -> None:
        """Put the copies in ``mask`` at day 0 with the starting cash; their window is day 0 repeated."""
        self._day[mask] = 0
        self._cash[mask] = self.initial_amount
        self._holdings[mask] = 0.0
        states = self._day_states(mask)
        obs = self._obs.copy()
        obs[mask] = states if self.window == 1 else states[:, None]
        self._obs = obs

    def _state_info(self) -> dict[str, np.ndarray]:
        return {"portfolio_value": self.portfolio_values(), "day": self._day.copy(), "cash": self._cash.copy()}

    # -- gym vector API ----------------------------------------------------------------------
    def reset(self, *, seed: int | list[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Start (or, with ``options["reset_mask"]``, restart some) copies at day 0; the env is deterministic."""
        if isinstance(seed, int):
            super().reset(seed=seed)
            self.action_space.seed(seed)
        mask = np.ones(self.num_envs, bool)
        if options is not None and "reset_mask" in options:
            mask = np.asarray(options["reset_mask"], bool).reshape(self.num_envs)
        self._restart(mask)
        return self._obs.copy(), _info_dict(self._state_info(), mask)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Trade one day in every copy; copies that reach the last day restart in the same step."""
        actions = np.clip(np.asarray(actions, dtype=np.float64).reshape(self.num_envs, self.n), -1.0, 1.0)
        orders = np.trunc(actions * self.hmax)
        turbulent = self._turbulent[self._day]
        if turbulent.any():  # crash protection: sell everything, buy nothing
            orders = np.where(turbulent[:, None], -self._holdings, orders)
        before = self.portfolio_values()
        prices = self.market.close[self._day]
        self._cash, self._holdings, shares, cost = execute_orders_batch(
            self._cash, self._holdings, prices, orders, self.cost_pct)
        self._day = self._day + 1
        info = self._state_info()
        reward = (info["portfolio_value"] - before) * self.reward_scaling
        self._push_window(self._day_states())
        terminated = self._day >= self._last_day
        truncated = np.zeros(self.num_envs, bool)
        info.update(cost=cost, shares=shares)
        infos = self._autoreset(terminated, info) if terminated.any() else _info_dict(info, ~truncated)
        return self._obs.copy(), reward, terminated, truncated, infos

    def _autoreset(self, done: np.ndarray, step_info: dict[str, np.ndarray]) -> dict[str, Any]:
        """Restart the finished copies; their last observation and step info go to ``final_obs``/``final_info``."""
        final_obs = np.full(self.num_envs, None, dtype=object)
        for i in np.flatnonzero(done):
            final_obs[i] = self._obs[i].copy()
        self._restart(done)
        infos = _info_dict(self._state_info(), np.ones(self.num_envs, bool))
        if not done.all():  # the scalar envs' reset info has no trade keys
            infos.update(_info_dict({"cost": step_info["cost"], "shares": step_info["shares"]}, ~done))
        infos.update(final_obs=final_obs, _final_obs=done.copy(), final_info=_info_dict(step_info, done),
                     _final_info=done.copy())
        return infos
