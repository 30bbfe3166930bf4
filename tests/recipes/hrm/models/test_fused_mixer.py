"""TRM's fused sequence-mixer kernel computes the PyTorch sub-block it replaces, and is used only where no gradient
is taken. Runs the kernel through Triton's CPU interpreter in a child process (fused_mixer_cases.py); the GPU
timing and bf16 comparison are benchmarks/fused_mixer_check.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="Triton is not installed (pip install -e '.[dev]' installs it on Linux x86-64)")

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture(scope="module")
def cases() -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    run = subprocess.run([sys.executable, "-m", "tests.recipes.hrm.models.fused_mixer_cases"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_kernel_equals_the_pytorch_sub_block(cases: dict) -> None:
    assert cases["available"]
    assert cases["diff_padded"] < 1e-5  # 23 positions padded to 32, 30 columns in blocks of 16
    assert cases["diff_pow2"] < 1e-5


def test_block_uses_the_kernel_only_without_gradients(cases: dict) -> None:
    d = cases["dispatch"]
    assert (d["no_grad_calls"], d["grad_calls"]) == (1, 0)
    assert d["grad_path_has_grad_fn"]
    assert d["diff"] < 1e-5 and d["grad_path_diff"] < 1e-5


def test_trm_segment_same_with_and_without_the_kernel(cases: dict) -> None:
    t = cases["trm"]
    assert t["logit_diff"] < 1e-4
    # training forward: the first T-1=2 recursions of n+1=3 passes, 2 layers each, are no-grad; the second
    # forward (fully no-grad) all 3 x 3 x 2
    assert (t["calls_fused"], t["calls_plain"]) == (2 * 3 * 2 + 3 * 3 * 2, 0)


def test_mismatched_weights_are_refused(cases: dict) -> None:
    assert "do not fit 5 positions" in cases["bad_weights"]


def test_cpu_tensors_take_the_pytorch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from distlab.recipes.hrm.models import fused_mixer

    monkeypatch.setattr(fused_mixer, "_INTERPRETED", False)
    assert not fused_mixer.available(torch.empty(1))


def test_long_sequences_take_the_pytorch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from distlab.recipes.hrm.models import fused_mixer

    monkeypatch.setattr(fused_mixer, "_INTERPRETED", True)  # as in the interpreter: only the length decides
    assert fused_mixer.available(torch.empty(97, 2, 8))
    assert not fused_mixer.available(torch.empty(901, 2, 8))


@pytest.mark.parametrize(("capability", "expected"), [((7, 5), False), ((8, 0), True), ((9, 0), True)])
def test_only_ampere_or_newer_gpus_use_the_kernel(monkeypatch: pytest.MonkeyPatch, capability, expected) -> None:
    import torch

    from distlab.recipes.hrm.models import fused_mixer

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert fused_mixer.supported(torch.device("cuda", 0)) is expected
