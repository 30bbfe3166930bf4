"""A GRPO step takes the reference's log-probs while the sandbox still scores the step's programs, and waits for
the rewards first only where dynamic sampling must see them; either order gives the same update."""

from __future__ import annotations

import contextlib

import pytest

pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")

import distlab.recipes.grpo.train as grpo_train  # noqa: E402
from distlab.config import resolve_config  # noqa: E402
from distlab.recipe import load_recipe  # noqa: E402
from distlab.recipes.lm.models.placed import SamplingCopy  # noqa: E402
from distlab.recipes.lm.models.source import load_causal_lm  # noqa: E402
from distlab.recipes.lm.rewards.scorer import RewardScorer  # noqa: E402
from distlab.recipes.lm.tasks.select import task_split  # noqa: E402
from distlab.runtime.dist import Runtime, module_checksum  # noqa: E402
from distlab.training.optim_state import adamw  # noqa: E402
from distlab.training.placement import DTYPES  # noqa: E402

TINY = ["model.source=tiny:llama-2l", "model.prompt_mode=text", "prompts_per_step=2", "num_generations=4",
        "micro_batch_size=4", "sampling.max_completion_length=12", "task.train_size=16", "task.families=add_const",
        "beta=0.04", "sandbox.timeout_s=3", "sandbox.workers=2", "dist.device=cpu", "run.seed=0"]


class _Session:
    rt = Runtime()
    run_dir = None  # where the first skipped update's dump would go; this step skips none

    def autocast(self):
        return contextlib.nullcontext()


def _step(monkeypatch, dynamic: bool) -> tuple[list[str], dict, str]:
    """One step on the tiny model; the order in which the reference pass and the reward wait ran."""
    cfg = resolve_config(load_recipe("grpo"), [], [*TINY, f"dynamic_sampling={str(dynamic).lower()}",
                                                   "max_refill_rounds=1"])
    tasks, _, few_shot = task_split(cfg.task)
    policy, tok = load_causal_lm(cfg.model.source, seed=0)
    reference, _ = load_causal_lm(cfg.model.source, seed=0)
    scorer = RewardScorer(cfg.sandbox, cfg.model.prompt_mode)
    rewards = grpo_train.reward_functions(cfg, scorer)
    parts = grpo_train.Parts(policy, SamplingCopy(policy, DTYPES[cfg.models["policy"].dtype]), reference,
                             adamw(list(policy.parameters()), cfg.optim.state_dtype, lr=cfg.lr), tok, few_shot,
                             scorer, rewards)
    order: list[str] = []
    real_frozen, real_collect = grpo_train.frozen_logprobs, rewards.collect

    def frozen(session, model, **kw):
        order.append("reference" if model is reference else "old" if model is not None else "none")
        return real_frozen(session, model, **kw)

    def collect(started):
        order.append("rewards")
        return real_collect(started)

    monkeypatch.setattr(grpo_train, "frozen_logprobs", frozen)
    monkeypatch.setattr(rewards, "collect", collect)
    try:
        metrics = grpo_train.grpo_step(cfg, _Session(), parts, tasks[:2], 0, tasks)
    finally:
        scorer.close()
    return order, metrics, module_checksum(policy)


def test_reference_pass_runs_before_the_reward_wait(monkeypatch):
    order, metrics, _ = _step(monkeypatch, dynamic=False)
    assert order == ["none", "reference", "rewards"]  # one update per rollout: no old-policy pass
    assert metrics["reward_wait_s"] >= 0 and metrics["ref_logprobs_s"] > 0


def test_dynamic_sampling_waits_for_the_rewards_first(monkeypatch):
    order, _, _ = _step(monkeypatch, dynamic=True)
    assert order.index("rewards") < order.index("reference")
    assert order[-2:] == ["none", "reference"]  # once, on the groups that train


def test_the_update_does_not_depend_on_the_order(monkeypatch):
    """With no refill possible (0 rounds) both paths train on the same groups: the same weights after the step."""
    a = _step(monkeypatch, dynamic=False)
    monkeypatch.undo()
    monkeypatch.setattr(grpo_train, "refill", lambda cfg, session, parts, groups, *a: (groups, 0))
    b = _step(monkeypatch, dynamic=True)
    assert a[1]["reward_mean"] == b[1]["reward_mean"] and a[1]["kl"] == b[1]["kl"]
    assert a[2] == b[2]
