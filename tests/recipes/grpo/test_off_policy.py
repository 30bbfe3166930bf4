"""Overlapped, K-step off-policy GRPO (``async.off_policy_steps``, issue 49 item 1): the truncated importance weight
against a hand computation, K=0 as the synchronous loop was, and K>=1 end to end: which weights sampled each batch,
the logged weights, and a resume that ends on the uninterrupted run's weights."""

from __future__ import annotations

import contextlib
import json
import math
import sys
from pathlib import Path

import pytest
import torch

from distlab.recipes.lm.pg.loss import GlobalNorm, policy_loss, truncated_importance_weight

from clitools import run_cli, run_clis, summary  # noqa: E402

# ------------------------------------------------------------------------------------- the weight, by hand


def test_the_truncated_weight_equals_a_hand_computation():
    pi_train = torch.tensor([[0.5, 0.2, 0.9], [0.3, 0.6, 0.05]], dtype=torch.float64)
    pi_behaviour = torch.tensor([[0.4, 0.4, 0.3], [0.3, 0.1, 0.5]], dtype=torch.float64)
    weight, cut = truncated_importance_weight(pi_train.log(), pi_behaviour.log(), cap=2.0)
    # 0.5/0.4, 0.2/0.4, 0.9/0.3 = 3 -> 2, 0.3/0.3, 0.6/0.1 = 6 -> 2, 0.05/0.5
    expected = torch.tensor([[1.25, 0.5, 2.0], [1.0, 2.0, 0.1]], dtype=torch.float64)
    torch.testing.assert_close(weight, expected, rtol=0, atol=1e-12)
    assert cut.tolist() == [[False, False, True], [False, True, False]]
    weight, cut = truncated_importance_weight(pi_train.log(), pi_behaviour.log(), cap=10.0)
    assert float(weight[1, 1]) == pytest.approx(6.0, abs=1e-12) and not cut.any()


def test_no_lag_gives_a_weight_of_exactly_one():
    logp = torch.randn(3, 7, generator=torch.Generator().manual_seed(0)) - 3.0
    weight, cut = truncated_importance_weight(logp, logp.clone(), cap=2.0)
    assert torch.equal(weight, torch.ones_like(logp)) and not cut.any()


def test_the_weight_multiplies_the_policy_gradient_term_only():
    """bnpo, one update per rollout (ratio 1): loss = (sum -A w + beta sum KL) / tokens; the KL is not weighted."""
    adv = torch.tensor([1.0, -2.0], dtype=torch.float64)
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.1], [0.2, 0.4, 0.8]], dtype=torch.float64)).requires_grad_()
    ref = torch.log(torch.tensor([[0.4, 0.25, 0.2], [0.2, 0.5, 0.8]], dtype=torch.float64))
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    weight = torch.tensor([[2.0, 0.5, 7.0], [1.0, 0.25, 1.5]], dtype=torch.float64)
    norm = GlobalNorm(num_seqs=2, num_tokens=5)
    loss, stats = policy_loss(logp, None, ref, adv, mask, epsilon=0.2, beta=0.1, loss_type="bnpo", norm=norm,
                              is_weight=weight)
    d = ref - logp.detach()
    kl = torch.expm1(d) - d
    pg = -(adv[:, None] * weight)
    expected = (torch.where(mask.bool(), pg + 0.1 * kl, torch.zeros_like(pg))).sum() / 5
    assert float(loss.detach()) == pytest.approx(float(expected), abs=1e-12)
    loss.backward()  # d/dlogp of -A w rho, rho = exp(logp - logp.detach()): -A w, plus the KL's gradient
    kl_grad = 0.1 * (1 - torch.exp(d))
    torch.testing.assert_close(logp.grad, torch.where(mask.bool(), pg + kl_grad, torch.zeros_like(pg)) / 5)
    assert float(stats["kl_sum"]) == pytest.approx(float(kl[mask.bool()].sum()), abs=1e-12)


# ------------------------------------------------------------------------------------ through the recipe

pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")

TINY = ["model.source=tiny:llama-2l", "model.prompt_mode=text", "prompts_per_step=2", "num_generations=4",
        "micro_batch_size=4", "sampling.max_completion_length=24", "task.train_size=32", "task.eval_size=4",
        "task.families=add_const", "task.eval_families=add_const", "task.eval_split=train", "sft_steps=8",
        "lr=1e-3", "log.every=1", "log.progress=false", "sandbox.timeout_s=3", "beta=0.04",
        "evaluation.before=false"]
# this command's summary param_checksum at c95afb3, the commit before async.off_policy_steps existed (torch 2.13 CPU)
SYNC_CHECKSUM = "5cb44a7bd6ab4b3060a16f2cde02ce16b7489d24"


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["split"] == "train"]


def test_k0_is_the_synchronous_loop_bit_for_bit(tmp_path):
    if not torch.__version__.startswith("2.13"):
        pytest.skip(f"the checksum was recorded with torch 2.13 on CPU; this is {torch.__version__}")
    run_cli(["train", "grpo", *TINY, "steps=3", "async.off_policy_steps=0", "run.name=k0"], tmp_path)
    assert summary(tmp_path / "runs" / "k0")["param_checksum"] == SYNC_CHECKSUM
    for r in _rows(tmp_path / "runs" / "k0"):  # no weight is applied: logged as exactly 1
        assert (r["is_weight/mean"], r["is_weight/max"], r["is_weight/truncated_tokens"]) == (1.0, 1.0, 0.0)
        assert r["policy_lag"] == 0.0


def test_k1_trains_on_batches_one_step_old_logs_the_weights_and_resumes_exactly(tmp_path):
    args = ["train", "grpo", *TINY, "steps=4", "async.off_policy_steps=1", "async.is_cap=1.5"]
    run_clis([[*args, "run.name=full"], [*args, "run.name=cut", "run.stop_at=2"]], tmp_path)  # side by side
    assert summary(tmp_path / "runs" / "cut")["status"] == "preempted"
    run_cli([*args, "run.name=cut"], tmp_path)
    full, cut = summary(tmp_path / "runs" / "full"), summary(tmp_path / "runs" / "cut")
    assert full["status"] == cut["status"] == "completed" and cut["step"] == 4
    rows = _rows(tmp_path / "runs" / "full")
    assert [r["policy_version"] for r in rows] == [0.0, 0.0, 1.0, 2.0]  # the first batch: the starting weights
    assert [r["policy_lag"] for r in rows] == [0.0, 1.0, 1.0, 1.0]
    # no lag: behaviour and trained log-probs come from the same forward on the same layout, so exactly 1
    assert (rows[0]["is_weight/mean"], rows[0]["is_weight/max"], rows[0]["is_weight/truncated_tokens"]) == \
        (1.0, 1.0, 0.0)
    for r in rows[1:]:
        assert 0.0 < r["is_weight/mean"] <= 1.5 and r["is_weight/mean"] != 1.0  # the weights moved: lr 1e-3
        assert 1.0 <= r["is_weight/max"] <= 1.5 and r["is_weight/truncated_tokens"] >= 0
        assert "behaviour_logprobs_s" in r or r is rows[-1]  # the last step samples nothing ahead
    assert sum(r["is_weight/truncated_tokens"] for r in rows) > 0  # cap 1.5: some token of a lagged batch exceeded
    # the pending batch (sampled at step 1 for step 2) was checkpointed: the resumed run trains on the same batches
    assert cut["param_checksum"] == full["param_checksum"]
    keys = ("reward_mean", "kl", "completion_length", "global_tokens", "is_weight/mean", "is_weight/max",
            "policy_version")
    assert [[r[k] for k in keys] for r in _rows(tmp_path / "runs" / "cut")] == [[r[k] for k in keys] for r in rows]


def test_settings_that_cannot_work_are_refused_before_training(tmp_path):
    for bad, said in (("async.off_policy_steps=-1", "off_policy_steps=-1 is invalid"), ("async.is_cap=0.5", "must be >= 1"),
                      ("dynamic_sampling=true", "not supported")):
        extra = ["async.off_policy_steps=1"] if bad.startswith("dynamic") else []
        proc = run_cli(["train", "grpo", *TINY, "steps=1", *extra, bad, "run.name=bad"], tmp_path, check=False)
        assert proc.returncode != 0 and said in proc.stdout + proc.stderr, bad


# ------------------------------------------------------ which weights sampled each batch, watched in process


class _Session:
    from distlab.runtime.dist import Runtime

    rt = Runtime()
    run_dir = None

    def autocast(self):
        return contextlib.nullcontext()


@pytest.mark.parametrize("lag", [1, 2])
def test_each_batch_is_sampled_by_the_weights_lag_steps_old(monkeypatch, lag):
    """The weights ``generate`` reads when it samples step j's batch are those after step max(0, j - K)'s update
    count: checked on the weights themselves (their checksums), not on the recorded version. And the overlap: the
    batch of step j + K is sampled and its programs are in the sandbox before step j's update starts, and its rewards
    are waited for only after that update."""
    import distlab.recipes.grpo.train as grpo_train
    from distlab.config import resolve_config
    from distlab.runtime.dist import module_checksum
    from distlab.training.optim_state import adamw
    from distlab.training.placement import DTYPES
    from distlab.recipe import load_recipe
    from distlab.recipes.grpo.off_policy import RolloutsAhead
    from distlab.recipes.lm.models.source import load_causal_lm
    from distlab.recipes.lm.models.placed import SamplingCopy
    from distlab.recipes.lm.rewards.scorer import RewardScorer
    from distlab.recipes.lm.rollout.seeds import rollout_seed
    from distlab.recipes.lm.tasks.select import task_split
    from distlab.runtime.sampler import GlobalBatchSampler

    steps = 4
    cfg = resolve_config(load_recipe("grpo"), [], [
        "model.source=tiny:llama-2l", "model.prompt_mode=text", "prompts_per_step=2", "num_generations=4",
        "micro_batch_size=4", "sampling.max_completion_length=12", "task.train_size=16", "task.families=add_const",
        "beta=0", "lr=1e-2", "sandbox.timeout_s=3", "sandbox.workers=2", "dist.device=cpu", "run.seed=0",
        f"async.off_policy_steps={lag}", f"steps={steps}"])
    tasks, _, few_shot = task_split(cfg.task)
    policy, tok = load_causal_lm(cfg.model.source, seed=0)
    scorer = RewardScorer(cfg.sandbox, cfg.model.prompt_mode)
    rewards = grpo_train.reward_functions(cfg, scorer)
    parts = grpo_train.Parts(policy, SamplingCopy(policy, DTYPES[cfg.models["policy"].dtype]), None,
                             adamw(list(policy.parameters()), cfg.optim.state_dtype, lr=cfg.lr), tok, few_shot,
                             scorer, rewards)
    sampler = GlobalBatchSampler(len(tasks), cfg.prompts_per_step, 0, 1, cfg.run.seed)
    session = _Session()
    sampled_by: dict[int, str] = {}  # step whose batch it is (read from the rollout seed) -> weights' checksum
    events: list[tuple[str, int]] = []
    real_generate, real_update, real_collect = grpo_train.generate, grpo_train.policy_update, rewards.collect

    def generate(model, *a, seed, **kw):
        target = next(j for j in range(steps) if rollout_seed(cfg.run.seed, j, 0) == seed)
        sampled_by[target] = module_checksum(model)
        out = real_generate(model, *a, seed=seed, **kw)
        events.append(("sampled", target))  # rollout() submits each completion's rewards right after
        return out

    def update(*a, **kw):
        events.append(("update", len([e for e in events if e[0] == "update"])))
        return real_update(*a, **kw)

    def collect(started):
        events.append(("rewards", len([e for e in events if e[0] == "rewards"])))
        return real_collect(started)

    monkeypatch.setattr(grpo_train, "generate", generate)
    monkeypatch.setattr(grpo_train, "policy_update", update)
    monkeypatch.setattr(rewards, "collect", collect)
    ahead = RolloutsAhead(lag, steps - 1, lambda j, version, times: grpo_train.sample_ahead(
        cfg, session, parts, [tasks[i] for i in sampler.next()], rollout_seed(cfg.run.seed, j, 0), version, times),
        lambda ro: grpo_train.resolved(parts, ro))
    weights = [module_checksum(policy)]  # weights[v]: after v updates
    logged = []
    try:
        for step in range(steps):
            logged.append(grpo_train.grpo_step(cfg, session, parts, [], step, tasks, ahead=ahead))
            weights.append(module_checksum(policy))
    finally:
        scorer.close()
    assert len(set(weights)) == steps + 1  # every update moved the weights
    assert sorted(sampled_by) == list(range(steps))
    for j in range(steps):
        assert sampled_by[j] == weights[max(0, j - lag)], j
        assert logged[j]["policy_version"] == max(0, j - lag) and logged[j]["policy_lag"] == min(j, lag)
    assert logged[0]["is_weight/mean"] == 1.0 and not math.isnan(logged[-1]["is_weight/mean"])
    assert not ahead.batches  # nothing sampled past the last step
    for j in range(steps - lag):  # batch j + K: sampled (rewards submitted) before update j, collected after it
        assert events.index(("sampled", j + lag)) < events.index(("update", j)) < events.index(("rewards", j + lag))


def test_two_ranks_sample_ahead_from_a_config_file_and_resume_on_the_same_weights(tmp_path):
    """Two real processes (gloo): each rank's batches ahead go into its own checkpoint file and come back on resume;
    the ``async:`` block of a config file reads as the ``async.*`` keys do."""
    (tmp_path / "async.yaml").write_text("async:\n  off_policy_steps: 1\n  importance_sampling_cap: 2.0\n")
    args = ["train", "grpo", "--config", str(tmp_path / "async.yaml"), *TINY, "steps=3", "beta=0", "--procs", "2"]
    run_clis([[*args, "run.name=full"], [*args, "run.name=cut", "run.stop_at=1"]], tmp_path)  # side by side
    run_cli([*args, "run.name=cut"], tmp_path)
    full, cut = summary(tmp_path / "runs" / "full"), summary(tmp_path / "runs" / "cut")
    assert full["world_size"] == cut["world_size"] == 2 and cut["status"] == "completed"
    assert [r["policy_lag"] for r in _rows(tmp_path / "runs" / "full")] == [0.0, 1.0, 1.0]
    assert cut["param_checksum"] == full["param_checksum"]
