"""What a PPO run prints: its progress line names what it shows (episodes ended, the mean return of the last 100
once there is one: never "nan"), and the closing line counts updates and suggests only what PPO has."""

import sys
from pathlib import Path

from clitools import run_cli, summary  # noqa: E402


def test_progress_and_closing_lines_say_what_ppo_did(tmp_path):
    p = run_cli(["train", "ppo", "env=CartPole-v1", "num_envs=2", "num_steps=32", "total_timesteps=512",
                 "run.name=pp"], tmp_path)
    text = p.stderr + p.stdout
    progress = [x for x in text.splitlines() if " update " in x and "/8 " in x]
    assert progress and all("nan" not in x and "0.00 update/s" not in x for x in progress), text
    assert "episodes=" in progress[0] and "env_steps_per_s=" in progress[0]
    assert "mean_return_100=" in progress[-1]  # CartPole episodes end within the run
    assert "run pp completed: update 8 of 8 in " in text
    assert "distlab eval" not in text  # PPO has no `distlab eval`
    s = summary(tmp_path / "runs" / "pp")
    assert (s["step"], s["steps"], s["updates"]) == (8, 8, 8)
