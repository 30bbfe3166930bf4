"""GRPO on multi-turn episodes through the real command: two gloo ranks train a few steps of ``code_feedback``
episodes, the update's token count is the policy's tokens alone, and evaluation plays the episodes too."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")

from clitools import run_cli, summary  # noqa: E402

# a warmed-up tiny model passes some add_const tasks at once (max_completion_length fits a solution), so groups
# have reward variance; the rest see their failing test and try again
TINY = ["model.source=tiny:llama-2l", "model.prompt_mode=text", "prompts_per_step=2", "num_generations=4",
        "micro_batch_size=4", "sampling.max_completion_length=48", "task.train_size=32", "task.eval_size=6",
        "task.families=add_const", "task.eval_families=add_const", "task.eval_split=train", "sft_steps=30",
        "sft_lr=3e-3", "lr=1e-3", "log.every=1", "log.progress=false", "sandbox.timeout_s=3", "beta=0.04",
        "env.name=code_feedback", "env.max_turns=3"]


def _rows(run_dir: Path, split: str = "train") -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["split"] == split]


def test_two_ranks_train_code_feedback_episodes(tmp_path):
    run_cli(["train", "grpo", *TINY, "steps=3", "run.name=two", "--procs", "2"], tmp_path, timeout=600)
    s = summary(tmp_path / "runs" / "two")
    assert s["status"] == "completed" and s["world_size"] == 2 and s["step"] == 3
    rows = _rows(tmp_path / "runs" / "two")
    episodes = 2 * 4  # prompts_per_step x num_generations, over both ranks
    for r in rows:
        assert 1.0 <= r["env/turns"] <= 3.0 and r["env/env_tokens"] > 0
        # the loss is normalised by the policy's tokens only: the environment's are not counted
        assert r["global_tokens"] == round(r["env/policy_tokens"] * episodes)
        # an episode ends when a reply passes, so its return is the share passed at some turn
        passed = sum(r.get(f"env/passed_at_turn_{t}", 0.0) for t in (1, 2, 3))
        assert r["reward_mean"] == pytest.approx(passed)
        assert r["grad_norm"] > 0 and r["is_weight/mean"] == 1.0
    assert any(r["zero_std_fraction"] < 1.0 for r in rows)  # some group's returns differed: a policy gradient
    assert any(r["env/turns"] > 1.0 for r in rows)  # failing episodes went on after their feedback
    ev = s["eval"]
    assert ev["n_problems"] == 6 and 1.0 <= ev["env_turns"] <= 3.0
    assert ev["env_return_low"] <= ev["env_return"] <= ev["env_return_high"]
    assert ev["env_return"] == pytest.approx(ev["env_first_turn_return"] + ev["env_later_turns_gain"])
    problems = json.loads((tmp_path / "runs" / "two" / "eval_step000003_problems.json").read_text())
    assert {"episode_return", "turns", "first_turn_return", "greedy"} <= set(problems[0])
