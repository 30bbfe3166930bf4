"""The PPO recipe through ``distlab train``: real processes, checkpoints, resume, seed-style flags, backtest."""

import json
import sys
from pathlib import Path

import pytest

from clitools import run_cli, run_clis  # noqa: E402

MARKET = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "market"
CARTPOLE = ["train", "ppo", "env=CartPole-v1", "num_envs=2", "num_steps=32", "total_timesteps=1024", "log.every=1",
            "run.name=cp", "--procs", "2"]
TRADING = ["train", "ppo", "env=trading", "policy=clstm", "window=5", "hidden_size=32", "feat_hidden=16",
           "num_envs=2", "num_minibatches=2", "num_steps=32", "total_timesteps=256",
           f"trading_data={MARKET / 'DJI_2009_2020.csv'}", "run.name=tr"]


@pytest.fixture(scope="module")
def started(tmp_path_factory) -> Path:
    """The two-rank CartPole run cut after update 3 and, with the market data, the trading run: independent, so
    they start side by side; each test carries on from its own."""
    d = tmp_path_factory.mktemp("ppo")
    run_clis([[*CARTPOLE, "run.stop_at=3"], *([TRADING] if MARKET.exists() else [])], d)
    return d


def _summary(d):
    return json.loads((d / "summary.json").read_text())


def test_two_ranks_stop_and_resume(started):
    run_dir = started / "runs" / "cp"
    assert _summary(run_dir)["status"] == "preempted"
    run_cli(CARTPOLE, started)
    s = _summary(run_dir)
    assert s["status"] == "completed" and s["updates"] == 8 and s["global_step"] == 1024 and s["world_size"] == 2
    assert "resumed from" in (run_dir / "rank1.log").read_text()
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"train"' in x]
    assert [r["update"] for r in rows] == list(range(1, 9))  # updates 1-3 before the stop, 4-8 after
    assert [r["step"] for r in rows] == [128 * u for u in range(1, 9)]  # env steps continue too (2 x 32 x 2 ranks)


def test_seed_flags_are_accepted(tmp_path):
    p = run_cli(["train", "ppo", "--num_gpus", "0", "--batch_size", "64", "--num_episodes", "5", "--dry-run"],
                tmp_path, check=False)
    assert p.returncode == 0, p.stderr
    assert "num_steps: 64" in p.stdout and "num_episodes: 5" in p.stdout


def test_bad_policy_is_one_line(tmp_path):
    p = run_cli(["train", "ppo", "policy=gru"], tmp_path, check=False)
    assert p.returncode == 2 and "policy='gru' is not one of mlp, lstm, clstm" in p.stderr


def test_bad_env_impl_is_one_line(tmp_path):
    p = run_cli(["train", "ppo", "env=trading", "env_impl=fast"], tmp_path, check=False)
    assert p.returncode == 2 and "env_impl='fast': choose vector" in p.stderr
    assert len([line for line in p.stderr.splitlines() if "env_impl" in line]) == 1


@pytest.mark.skipif(not MARKET.exists(), reason="../shared/data/market not present")
def test_trading_train_then_backtest_on_dji(started):
    assert _summary(started / "runs" / "tr")["status"] == "completed"
    run_cli(["backtest", str(started / "runs" / "tr"), "--start", "2016-01-01"], started)
    bt = json.loads((started / "runs" / "tr" / "backtest" / "backtest.json").read_text())
    assert bt["start"] >= "2016-01-01" and bt["days"] > 1000
    for who in ("policy", "buy_and_hold"):
        assert {"cumulative_return", "sharpe", "max_drawdown"} <= set(bt[who])
    assert (started / "runs" / "tr" / "backtest" / "equity.png").exists()
