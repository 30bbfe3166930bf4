"""train(): trading env through make_vec_env, input errors.

Checkpoint and resume go through the core's DCP checkpoints in the ``ppo`` recipe and are tested there
(tests/recipes/ppo: stop at update 3 on two ranks, resume, updates and env steps continue).
"""

from pathlib import Path

import numpy as np
import pytest

from distlab.errors import DistlabError
from distlab.recipes.ppo.algo import PPOConfig, PPOHooks, train
from distlab.recipes.ppo.envs import make_vec_env

MARKET = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "market"


@pytest.mark.skipif(not (MARKET / "DJI_2009_2020.csv").is_file(), reason="shared market data absent")
def test_clstm_trains_on_trading_env():
    envs = make_vec_env("trading", 2, 0, start="2015-01-01", end="2016-01-01", window=5, turbulence_threshold=1e9)
    assert envs.single_observation_space.shape == (5, 13)
    envs.close()
    seen = []

    class H(PPOHooks):
        def on_update(self, update_idx, global_step, metrics):
            seen.append(metrics)

    cfg = PPOConfig(env_id="trading", policy="clstm", num_envs=2, num_steps=64, num_minibatches=2, update_epochs=1,
                    total_timesteps=256, trading_start="2015-09-01", trading_end="2016-01-01", window=5,
                    feat_hidden=16, hidden_size=32, torch_threads=1)
    out = train(cfg, H())
    assert out["global_step"] == 256 and len(seen) == 2
    assert np.isfinite(seen[-1]["value_loss"]) and out["episodes"] >= 2   # ~85-day episodes finish


def test_bad_inputs_raise_distlab_errors():
    with pytest.raises(DistlabError, match="CartPole-v1"):
        make_vec_env("CartPol-v1", 1, 0)
    with pytest.raises(DistlabError, match="divisible"):
        train(PPOConfig(policy="lstm", num_envs=3, num_minibatches=2, num_steps=8, total_timesteps=24))
