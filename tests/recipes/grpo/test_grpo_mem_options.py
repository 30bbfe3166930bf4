"""GRPO with the core's memory options on a tiny Llama: checkpointed decoder layers keep the losses."""

import sys
from pathlib import Path

import pytest

from clitools import run_cli  # noqa: E402

pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")

from test_grpo_recipe import TINY, _rows  # noqa: E402


def test_checkpointed_decoder_layers_keep_losses_and_bad_pairs_are_refused(tmp_path):
    args = ["train", "grpo", *TINY, "steps=2", "beta=0.04", "evaluation.before=false"]  # SFT warm-up trains too
    run_cli([*args, "run.name=plain"], tmp_path)
    run_cli([*args, "run.name=ac", "dist.activation_checkpointing=blocks"], tmp_path)
    plain, ac = _rows(tmp_path / "runs" / "plain"), _rows(tmp_path / "runs" / "ac")
    # the same rollouts, and recomputation replays the same float ops: 1e-5 relative
    keys = ("entropy", "grad_norm", "kl", "reward_mean", "completion_length")
    assert [r[k] for r in ac for k in keys] == pytest.approx([r[k] for r in plain for k in keys], rel=1e-5, abs=1e-9)
    p = run_cli([*args, "model.gradient_checkpointing=true", "dist.activation_checkpointing=blocks"], tmp_path,
                check=False)
    assert p.returncode == 2 and "both recompute" in p.stderr
