"""Chaining ACT calls through a model that replays CUDA graphs: each replay writes its outputs into the same
memory, so the carry a call returns must be copied out before the next call overwrites it.

The GPU is not needed to show the mechanism: a stand-in head that writes every output into fixed buffers behaves
as a replayed graph does, and chaining it without the copies runs a different (wrong) trajectory.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from distlab.config import CompileMode, DistConfig
from distlab.recipes.hrm.models.loss import run_segment
from distlab.training.wrap import replays_cuda_graphs

from .tiny import make_batch, tiny_model


class Replaying(nn.Module):
    """The head, with what a CUDA-graph replay does to the previous call's outputs: a new replay takes their memory
    back before it reads its inputs, so an output still held by the caller holds garbage (here NaN and zeros)."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head
        self.last: tuple | None = None

    def initial_carry(self, batch):
        return self.head.initial_carry(batch)

    def forward(self, carry, batch):
        if self.last is not None:
            old_carry, _, metrics, outputs, halted = self.last
            with torch.no_grad():
                for z in old_carry.inner:
                    z.fill_(float("nan"))
                old_carry.steps.zero_()
                old_carry.halted.fill_(True)
                for v in [*old_carry.current_data.values(), *metrics.values(), *outputs.values()]:
                    v.zero_()
        self.last = self.head(carry, batch)
        return self.last


def _trajectory(head, batch, segments: int, graphs: bool) -> list[torch.Tensor]:
    carry = head.initial_carry(batch)
    logits = []
    with torch.no_grad():
        for _ in range(segments):
            carry, _, _, outputs, _ = run_segment(head, carry, batch, graphs)
            logits.append(outputs["logits"].clone())
    return logits


@pytest.fixture
def eager() -> tuple:
    """A tiny HRM, a batch, and the logits of three chained eager segments."""
    torch.manual_seed(0)
    model = tiny_model("hrm", act="fixed", halt_max_steps=4).train()
    batch = make_batch(seed=3)
    return model, batch, _trajectory(model, batch, 3, graphs=False)


def test_copies_make_a_replaying_model_chain_like_eager(eager) -> None:
    model, batch, want = eager
    safe = _trajectory(Replaying(model), batch, 3, graphs=True)
    for a, b in zip(want, safe):
        torch.testing.assert_close(a, b)


def test_without_the_copies_a_replaying_model_runs_a_different_trajectory(eager) -> None:
    """The failure the copies prevent: the carry handed to the next call is garbage by the time it is read."""
    model, batch, want = eager
    unsafe = _trajectory(Replaying(model), batch, 3, graphs=False)
    torch.testing.assert_close(unsafe[0], want[0])  # the first call reads a fresh carry
    assert not torch.allclose(unsafe[1], want[1], equal_nan=True)


def test_only_compiled_cuda_graph_modes_on_a_gpu_replay() -> None:
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert replays_cuda_graphs(DistConfig(compile=True, compile_mode=CompileMode.reduce_overhead), cuda)
    assert replays_cuda_graphs(DistConfig(compile=True, compile_mode=CompileMode.max_autotune), cuda)
    assert not replays_cuda_graphs(DistConfig(compile=True, compile_mode=CompileMode.reduce_overhead), cpu)
    assert not replays_cuda_graphs(DistConfig(compile=False, compile_mode=CompileMode.reduce_overhead), cuda)
    assert not replays_cuda_graphs(DistConfig(compile=True, compile_mode=CompileMode.max_autotune_no_cudagraphs),
                                   cuda)
    assert not replays_cuda_graphs(DistConfig(compile=True), cuda)
