"""HRM/TRM with the core's memory options: checkpointed reasoning blocks keep the losses, auto micro-batch keeps
the global batch, bf16 optimizer states train."""

import json
import sys
from pathlib import Path

import pytest

from clitools import run_cli  # noqa: E402
from test_hrm_train import ARCHS, TINY, _train_rows  # noqa: E402

from distlab.training.micro_batch import FAKE_LIMIT_ENV  # noqa: E402


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("hrm-mem")


@pytest.mark.parametrize("arch", ["hrm", "trm"])
def test_checkpointed_blocks_keep_losses(workdir, arch):
    args = ["train", "hrm", *TINY, "steps=4", f"arch.name={arch}", *ARCHS[arch]]
    run_cli([*args, f"run.name={arch}-plain"], workdir)
    run_cli([*args, f"run.name={arch}-ac", "dist.activation_checkpointing=blocks", "dist.auto_micro_batch=true",
             "optim.state_dtype=bf16"], workdir, env={FAKE_LIMIT_ENV: "4"}, timeout=600)
    plain = [r["loss"] for r in _train_rows(workdir / "runs" / f"{arch}-plain")]
    ac_run = workdir / "runs" / f"{arch}-ac"
    ac = [r["loss"] for r in _train_rows(ac_run)]
    # step 1 runs before any optimizer state exists and the micro-batches sum to the same global loss:
    # equal to float rounding (1e-5 relative); later steps differ by the bf16 moments only (2%)
    assert ac[0] == pytest.approx(plain[0], rel=1e-5)
    assert ac == pytest.approx(plain, rel=2e-2)
    plan = json.loads((ac_run / "manifest.json").read_text())["auto_micro_batch"]
    assert plan["micro_batch"] == 4 and plan["grad_accum"] == 2


def test_state_dtype_with_adam_atan2_is_refused(workdir):
    p = run_cli(["train", "hrm", *TINY, "optimizer=adam_atan2", "optim.state_dtype=int8"], workdir, check=False)
    assert p.returncode == 2 and "applies to AdamW" in p.stderr
