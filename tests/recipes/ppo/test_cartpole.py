"""End-to-end learning on CPU: CartPole solved by the MLP, masked-velocity CartPole needs memory."""

from distlab.recipes.ppo.algo import PPOConfig, train

# Tuned for speed on 2 cores (rl-zoo-like CartPole settings); the run stops once solved.
SOLVE_BUDGET = 100_000


def test_mlp_solves_cartpole_within_budget():
    cfg = PPOConfig(env_id="CartPole-v1", policy="mlp", num_envs=8, num_steps=32, num_minibatches=1,
                    update_epochs=20, lr=1e-3, gamma=0.98, gae_lambda=0.8, ent_coef=0.0, seed=1,
                    total_timesteps=SOLVE_BUDGET, stop_return=475.0, torch_threads=1)
    out = train(cfg)
    print(f"MLP CartPole solved at {out['solved_at_step']} steps ({out['seconds']:.1f}s, {out['sps']:.0f} sps)")
    assert out["solved_at_step"] is not None and out["solved_at_step"] <= SOLVE_BUDGET
    assert out["mean_return_100"] >= 475.0


MEMORY_STEPS = 40_960
LSTM_MIN, MLP_MAX = 90.0, 70.0


def _masked(policy: str) -> dict:
    cfg = PPOConfig(env_id="CartPole-v1", policy=policy, mask_velocity=True, num_envs=8, num_steps=64,
                    num_minibatches=2, update_epochs=4, lr=1e-3, gamma=0.98, gae_lambda=0.95, ent_coef=0.0,
                    clip_vloss=False, hidden_size=64, seed=1, total_timesteps=MEMORY_STEPS, torch_threads=1)
    return train(cfg)


def test_lstm_beats_mlp_on_masked_velocity_cartpole():
    lstm, mlp = _masked("lstm"), _masked("mlp")
    print(f"masked CartPole after {MEMORY_STEPS} steps: LSTM {lstm['mean_return_100']:.1f} "
          f"({lstm['seconds']:.0f}s), MLP {mlp['mean_return_100']:.1f} ({mlp['seconds']:.0f}s)")
    assert lstm["mean_return_100"] >= LSTM_MIN
    assert mlp["mean_return_100"] < MLP_MAX
