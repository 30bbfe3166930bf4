"""The sandbox pool is sized per node: ranks on one node share its cores instead of each taking all of them."""

from __future__ import annotations

import os

import pytest

from distlab.errors import DistlabError
from distlab.sandbox import SandboxConfig
from distlab.sandbox.config import check_limits, per_rank


def test_auto_divides_the_cores_among_the_ranks_on_the_node(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert per_rank(SandboxConfig(), 1).workers == 64
    assert per_rank(SandboxConfig(), 4).workers == 16
    assert per_rank(SandboxConfig(), 3).workers == 21
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert per_rank(SandboxConfig(), 8).workers == 1  # never none


def test_a_number_the_user_gave_is_kept_per_rank():
    assert per_rank(SandboxConfig(workers=5), 4).workers == 5


def test_workers_zero_is_auto_and_negative_is_refused():
    check_limits(SandboxConfig(workers=0))
    with pytest.raises(DistlabError, match="sandbox.workers=-1 must be between 0 and 256"):
        check_limits(SandboxConfig(workers=-1))


def test_the_reward_scorer_sizes_its_sandbox_for_its_node(monkeypatch):
    from distlab.recipes.lm.rewards.scorer import RewardScorer

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    scorer = RewardScorer(SandboxConfig(isolation="rlimits"), "chat", ranks_on_node=4)
    try:
        assert scorer.sandbox.config.workers == 2
        assert scorer.pool._max_workers == 2
    finally:
        scorer.pool.shutdown()
        scorer.sandbox.close()
