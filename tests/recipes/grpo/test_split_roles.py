"""GRPO with rollout and trainer ranks split (``async.rollout_ranks``, issue 49 item 1), in real processes (gloo, CPU):
the lag each step logs, the weights the rollout rank holds after a round, the same training as trainer ranks that
sample for themselves, an exact resume, and the settings refused before launch."""

from __future__ import annotations

import json

import pytest

from clitools import run_clis, summary  # noqa: E402
from test_off_policy import TINY as OFF_POLICY_TINY, _rows  # noqa: E402

pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")

TINY = [*OFF_POLICY_TINY, "async.off_policy_steps=1"]


def test_one_rollout_rank_feeds_two_trainers_with_lag_k_and_resumes_exactly(tmp_path):
    args = ["train", "grpo", *TINY, "steps=4", "--procs", "3", "async.rollout_ranks=1"]
    run_clis([[*args, "run.name=split"], [*args, "run.name=cut", "run.stop_at=2"]], tmp_path)  # side by side
    assert summary(tmp_path / "runs" / "cut")["status"] == "preempted"
    # the resume, beside the same two trainers sampling for themselves (every rank both samples and trains) and an
    # evaluation of the split run's checkpoint, which samples on the ranks it has: one process is enough
    run_clis([[*args, "run.name=cut"], ["train", "grpo", *TINY, "steps=4", "--procs", "2", "run.name=together"],
              ["eval", str(tmp_path / "runs" / "split")]], tmp_path)
    split, cut, together = (summary(tmp_path / "runs" / n) for n in ("split", "cut", "together"))
    assert split["status"] == cut["status"] == "completed" and cut["step"] == 4
    assert split["world_size"] == 2 and split["rollout_ranks"] == 1  # DDP over the trainers only
    # the last round handed the trained weights to the rollout rank: its checksum is the trainers'
    assert split["rollout_param_checksums"] == [split["param_checksum"]]
    assert cut["rollout_param_checksums"] == [cut["param_checksum"]]
    rows = _rows(tmp_path / "runs" / "split")
    assert [r["policy_version"] for r in rows] == [0.0, 0.0, 1.0, 2.0]  # the first batch: the starting weights
    assert [r["policy_lag"] for r in rows] == [0.0, 1.0, 1.0, 1.0]  # K from the second step on
    assert (rows[0]["is_weight/mean"], rows[0]["is_weight/max"]) == (1.0, 1.0)  # no lag: the same forward, exactly 1
    assert all(r["is_weight/mean"] != 1.0 for r in rows[1:])  # lagged batches: the weights moved
    for r in rows:
        assert r["batch_wait_s"] >= 0.0 and r["weight_sync_s"] > 0.0 and r["generate_s"] > 0.0
    # the rollout rank's behaviour log-probs and batches are those a trainer would have taken itself
    assert split["param_checksum"] == together["param_checksum"]
    # the batches in flight at the checkpoint (step 2's, received; step 3's, asked for) come back on resume
    assert cut["param_checksum"] == split["param_checksum"]
    keys = ("reward_mean", "kl", "global_tokens", "is_weight/mean", "is_weight/max", "policy_version", "policy_lag")
    assert [[r[k] for k in keys] for r in _rows(tmp_path / "runs" / "cut")] == [[r[k] for k in keys] for r in rows]
    (evaluated,) = (tmp_path / "runs" / "split" / "eval").glob("*/eval.json")
    assert "pass@1" in json.loads(evaluated.read_text())


def test_a_rollout_rank_of_an_offloaded_fsdp_job_samples_from_whole_weights(tmp_path):
    """``dist.wrap=fsdp dist.cpu_offload=true``: the rollout rank's policy was sharded over the whole job's mesh and
    its first round crashed (c10d.broadcast_ has no DTensor sharding strategy). It trains as one process sampling for
    itself does, and holds the trained weights after the last round."""
    offload = [*TINY, "steps=2", "dist.wrap=fsdp", "dist.cpu_offload=true"]
    run_clis([["train", "grpo", *offload, "--procs", "2", "async.rollout_ranks=1", "run.name=split"],
              ["train", "grpo", *offload, "--procs", "1", "run.name=alone"]], tmp_path)  # side by side
    split, alone = summary(tmp_path / "runs" / "split"), summary(tmp_path / "runs" / "alone")
    assert split["status"] == "completed" and split["param_checksum"] == alone["param_checksum"]
    assert split["rollout_param_checksums"] == [split["param_checksum"]]


@pytest.mark.parametrize("settings, procs, said", [
    (["async.rollout_ranks=1", "async.off_policy_steps=0"], 2, "needs async.off_policy_steps >= 1"),
    (["async.rollout_ranks=2"], 2, "leaves no trainer among 2 rank(s)"),
    (["async.rollout_ranks=2"], 3, "exceeds the 1 trainer rank(s)"),
    (["async.rollout_ranks=1", "prompts_per_step=3"], 3, "does not split over the 2 trainer rank(s)"),
    (["async.rollout_ranks=-1"], 2, "rollout_ranks=-1 is invalid"),
    (["async.rollout_ranks=1", "dynamic_sampling=true"], 3, "dynamic_sampling=true is not supported"),
])
def test_settings_that_cannot_split_are_refused_in_one_line_before_launch(tmp_path, monkeypatch, capsys, settings,
                                                                          procs, said):
    """In this process, through the command's own entry point: refused in preflight, before any rank exists."""
    from distlab.cli import main

    monkeypatch.chdir(tmp_path)
    rc = main(["train", "grpo", *TINY, "steps=1", *settings, "run.name=bad", "--procs", str(procs)])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip() and "Warning" not in ln and not ln.startswith("  ")]
    assert rc not in (0, None) and len(lines) == 1 and lines[0].startswith("distlab: error:"), err
    assert said in lines[0] and not (tmp_path / "runs").exists()


def test_rollout_ranks_do_not_rename_the_run():
    """Rollout ranks change who samples, not what is trained: the same command on another split resumes the run."""
    from distlab.config import finalize_config, resolve_config
    from distlab.recipe import load_recipe

    recipe = load_recipe("grpo")

    def name(*overrides: str) -> str:
        cfg, _ = finalize_config(recipe, resolve_config(recipe, [], ["async.off_policy_steps=1", *overrides]), 4)
        return cfg.run.name

    assert name() == name("async.rollout_ranks=1") == name("async.rollout_ranks=2")
    assert name() != name("async.importance_sampling_cap=3")
