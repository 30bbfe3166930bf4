"""Vectorised environments for PPO: any registered Gymnasium id, masked-velocity variants, ``trading``.

Sub-environments auto-reset in the same step they finish (the reset observation is returned with
``done=True``), which is the convention the rollout/GAE code assumes: ``dones[t]`` marks the first
observation of a new episode. Gymnasium >= 1.1 needs that asked for explicitly; 0.29 does it by default.

``trading`` is by default the batched :class:`~distlab.recipes.ppo.trading_vec.VecStockTradingEnv`
(``env_impl="vector"``), which steps all copies as array operations and follows the same conventions;
``env_impl="scalar"`` gives one :class:`~distlab.recipes.ppo.trading.StockTradingEnv` per copy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from distlab.errors import DistlabError, near_matches

log = logging.getLogger("distlab")

ENV_IMPLS = ("vector", "scalar")

# Observation entries that are velocities; hiding them turns a Markov task into a memory task.
VELOCITY_INDICES: dict[str, list[int]] = {
    "CartPole": [1, 3],
    "Pendulum": [2],
    "MountainCar": [1],
    "MountainCarContinuous": [1],
    "Acrobot": [4, 5],
    "LunarLander": [2, 3, 5],
    "LunarLanderContinuous": [2, 3, 5],
}


class MaskVelocity(gym.ObservationWrapper):
    """Zero the velocity entries of the observation so the agent must infer them from history."""

    def __init__(self, env: gym.Env, indices: list[int] | None = None):
        super().__init__(env)
        if indices is None:
            name = env.spec.name if env.spec is not None else ""
            if name not in VELOCITY_INDICES:
                raise DistlabError(f"no velocity indices known for {name or env!r}: pass mask_indices "
                                   f"explicitly or use one of {sorted(VELOCITY_INDICES)}")
            indices = VELOCITY_INDICES[name]
        self.mask = np.ones(env.observation_space.shape, dtype=env.observation_space.dtype)
        self.mask[indices] = 0

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation * self.mask


def _thunk(env_id: str, seed: int, mask_velocity: bool, mask_indices: list[int] | None,
           trading_market: Any, kw: dict) -> Callable[[], gym.Env]:
    def make() -> gym.Env:
        if env_id == "trading":
            from distlab.recipes.ppo.trading import make_trading_env
            env = make_trading_env(market=trading_market, **kw)
        else:
            env = gym.make(env_id, **kw)
        if mask_velocity:
            env = MaskVelocity(env, mask_indices)
        env.action_space.seed(seed)
        return env
    return make


def check_env_id(env_id: str) -> None:
    """Refuse an id Gymnasium does not know, with the nearest registered one: checked in ``validate`` so the
    refusal comes before any rank starts or a run directory exists, not when the first rank builds its envs."""
    if env_id != "trading" and env_id not in gym.registry:
        hint = near_matches(env_id, list(gym.registry) + ["trading"])
        raise DistlabError(f"env={env_id}: unknown environment id" + (f"; did you mean env={hint[0]}?" if hint else
                                                                     "; use a registered Gymnasium id (e.g. "
                                                                     "env=CartPole-v1) or env=trading"))


def check_env_impl(env_impl: str, asynchronous: bool = False, mask_velocity: bool = False) -> None:
    """Refuse an unknown ``env_impl`` and the settings the batched trading env cannot honour."""
    if env_impl not in ENV_IMPLS:
        raise DistlabError(f"env_impl={env_impl!r}: choose vector (trading copies stepped as arrays, the default) "
                           "or scalar (one Python env per copy)")
    if env_impl == "vector" and (asynchronous or mask_velocity):
        what = "async_envs=true" if asynchronous else "mask_velocity=true"
        raise DistlabError(f"{what} needs one env object per copy, which the vectorised trading env does not have: "
                           "set env_impl=scalar")


def _record_stats(venv: gym.vector.VectorEnv) -> gym.vector.VectorEnv:
    if hasattr(gym.vector, "AutoresetMode"):
        return gym.wrappers.vector.RecordEpisodeStatistics(venv)
    return gym.wrappers.RecordEpisodeStatistics(venv)  # gymnasium 0.29


def _trading_market(kw: dict[str, Any]) -> Any:
    """The market the trading copies share, loaded once (``data``/``turbulence``/``market`` are taken out of kw)."""
    from distlab.recipes.ppo.trading import load_market
    market = kw.pop("market", None)
    need_turb = kw.pop("turbulence", None)
    data = kw.pop("data", None)
    if market is None:
        if need_turb is None:
            need_turb = kw.get("turbulence_threshold") is not None
        market = load_market(data, need_turb or None)
    return market


def _batched_trading(market: Any, num_envs: int, seed: int, kw: dict[str, Any]) -> gym.vector.VectorEnv:
    from distlab.recipes.ppo.trading import split_by_date
    from distlab.recipes.ppo.trading_vec import VecStockTradingEnv
    kw = dict(kw)
    start, end = kw.pop("start", None), kw.pop("end", None)
    if start or end:
        market = split_by_date(market, start, end)
    venv = VecStockTradingEnv(market, num_envs, **kw)
    venv.action_space.seed(seed)
    return _record_stats(venv)


def make_vec_env(env_id: str, num_envs: int, seed: int, asynchronous: bool = False,
                 mask_velocity: bool = False, mask_indices: list[int] | None = None, env_impl: str = "vector",
                 **kw: Any) -> gym.vector.VectorEnv:
    """``num_envs`` copies of ``env_id`` with episode statistics in ``infos['episode']``.

    ``kw`` goes to ``gym.make`` (or to :func:`make_trading_env` for ``trading``; the market is
    loaded once here and shared by the copies). Reset it with ``seed=seed`` so copy i gets
    ``seed + i``; action spaces are seeded the same way here. ``env_impl`` picks the batched
    (``vector``) or per-copy (``scalar``) trading env; other ids always get Gymnasium's vector envs.
    """
    if num_envs < 1:
        raise DistlabError(f"num_envs={num_envs}: need at least one environment")
    check_env_id(env_id)
    market = None
    if env_id == "trading":
        check_env_impl(env_impl)
        market = _trading_market(kw)
        if env_impl == "vector":
            if hasattr(gym.vector, "AutoresetMode"):
                check_env_impl(env_impl, asynchronous, mask_velocity)
                return _batched_trading(market, num_envs, seed, kw)
            log.warning("gymnasium %s has no same-step autoreset API: using the scalar trading env", gym.__version__)
    fns = [_thunk(env_id, seed + i, mask_velocity, mask_indices, market, kw) for i in range(num_envs)]
    cls = gym.vector.AsyncVectorEnv if asynchronous else gym.vector.SyncVectorEnv
    mode = getattr(gym.vector, "AutoresetMode", None)
    if mode is not None:
        return _record_stats(cls(fns, autoreset_mode=mode.SAME_STEP))
    return _record_stats(cls(fns))  # gymnasium 0.29: same-step autoreset is the only mode


def finished_episodes(infos: dict) -> tuple[list[float], list[int]]:
    """Returns and lengths of the episodes that ended in this vector step."""
    ep = infos.get("episode")
    if ep is None:
        return [], []
    mask = np.asarray(infos.get("_episode", np.ones(len(ep["r"]), bool)), bool)
    return [float(r) for r in np.asarray(ep["r"])[mask]], [int(v) for v in np.asarray(ep["l"])[mask]]
