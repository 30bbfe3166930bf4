"""The puzzle embedding's persistent slots: the compiled training forward stays one graph, and training gives the
numbers of the one-off copies it replaced (the code before the slots), on 2 real ranks and with accumulation.

A forward no slot was chosen for still makes a one-off leaf, the old code path line for line, so the old numbers
are computed here, in the same process, by simply not choosing slots.
"""

from __future__ import annotations

import numpy as np
import torch
import torch._dynamo
from torch import nn
from torch._dynamo.utils import counters

from distlab.recipes.hrm.models import SparsePuzzleEmbedding
from distlab.recipes.hrm.optim import build_optimizers, find_puzzle_emb
from mp import run_ranks

from .tiny import make_batch, tiny_model

GLOBAL_BATCH, STEPS = 8, 3


def _graph_breaks() -> int:
    return sum(counters["graph_break"].values())


class _EmbedThenProject(nn.Module):
    """The smallest compiled region around the table: its copy goes through a layer that has a gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = SparsePuzzleEmbedding(6, 4, cast_to=torch.float32)
        self.proj = nn.Linear(4, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.proj(self.emb(ids)).sum()


def test_a_chosen_slot_keeps_the_graph_whole_where_a_one_off_copy_breaks_it() -> None:
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = _EmbedThenProject().train()
    step = torch.compile(model)
    ids = torch.tensor([1, 4, 4])
    step(ids).backward()  # no slot chosen: the one-off leaf, which Dynamo cannot return from its graph
    assert _graph_breaks() > 0  # the break the slots exist to avoid (a torch that traced it would fail here)
    one_off = model.emb.pop_local_grads()

    torch._dynamo.reset()
    counters.clear()
    model.emb.use_slot(0, rows=3)
    step(ids).backward()
    assert _graph_breaks() == 0
    slotted = model.emb.pop_local_grads()
    assert torch.equal(slotted[0], one_off[0]) and torch.equal(slotted[1], one_off[1])
    assert model.emb.pop_local_grads()[0].numel() == 0  # popped once, gone


def test_slots_stay_out_of_no_grad_passes_checkpoints_and_skipped_steps() -> None:
    emb = SparsePuzzleEmbedding(6, 4, cast_to=torch.float32).train()
    emb.weights.copy_(torch.arange(24.0).view(6, 4))
    ids = torch.tensor([5, 0])
    emb.use_slot(0, rows=2)
    with torch.no_grad():  # the Q-target forward of a training step
        emb(ids)
    assert emb.eval()(ids).tolist() == emb.weights[ids].tolist()
    rows = emb.train()(ids)  # the slot chosen before the no-grad passes is still the one filled
    assert rows.is_leaf and rows.tolist() == emb.weights[ids].tolist()
    assert list(emb.state_dict()) == ["weights"] and not list(emb.parameters())
    rows.sum().backward()
    emb.drop_local_grads()  # a step that fp16 loss scaling skipped
    assert rows.grad is None and emb.pop_local_grads()[0].numel() == 0
    again = emb(ids)  # no slot chosen since: a one-off copy, never the dropped slot
    assert again is not rows


def _train(rank: int, world_size: int, accum: int, slots: bool, compile: bool) -> tuple[bytes, str, int]:
    """``STEPS`` optimizer steps as the trainer takes them (an ACT carry per micro-batch, gradients synced on the
    last micro-batch, the loss scaled to the global mean); returns the table, the checksum of the whole state and
    the graph breaks the compiled forward had."""
    from distlab.config import DistConfig
    from distlab.runtime.dist import Runtime, module_checksum
    from distlab.training.wrap import no_sync, unwrap, wrap_model

    torch._dynamo.reset()
    counters.clear()
    rt = Runtime.from_process_group()
    core = tiny_model("hrm", act="q_learning").train()
    model = wrap_model(core, rt, DistConfig(compile=compile))
    opts = build_optimizers(core, "adamw", lr=1e-2, weight_decay=0.1, puzzle_emb_lr=0.1, rt=rt, equal_rows=True)
    emb = find_puzzle_emb(core)
    assert emb is not None
    per_micro = GLOBAL_BATCH // world_size // accum
    carries: list = [None] * accum
    with torch._dynamo.config.patch(error_on_recompile=True):  # one compiled forward serves every micro-batch
        for step in range(STEPS):
            batch = make_batch(GLOBAL_BATCH, seed=step)
            for micro in range(accum):
                start = (rank * accum + micro) * per_micro
                part = {k: v[start:start + per_micro] for k, v in batch.items()}
                carries[micro] = core.initial_carry(part) if carries[micro] is None else carries[micro]
                with no_sync(model, micro < accum - 1):
                    if slots:
                        emb.use_slot(micro, per_micro)
                    carries[micro], loss, *_ = model(carries[micro], part)
                    (loss / GLOBAL_BATCH * world_size).backward()
            for opt in opts:
                opt.step()
                opt.zero_grad(set_to_none=True)
    return emb.weights.numpy().tobytes(), module_checksum(unwrap(model)), _graph_breaks()


def _slots_and_old_path(rank: int, world_size: int, accum: int) -> dict[str, tuple[bytes, str, int]]:
    return {"slots": _train(rank, world_size, accum, slots=True, compile=False),
            "old": _train(rank, world_size, accum, slots=False, compile=False)}


def test_two_ranks_with_accumulation_train_exactly_as_the_one_off_copies_did() -> None:
    for accum in (1, 2):
        ranks = run_ranks(_slots_and_old_path, 2, accum)
        for rank, out in enumerate(ranks):
            assert out["slots"][:2] == out["old"][:2], f"accum {accum}, rank {rank}: slots differ from the old path"
            assert out["slots"][:2] == ranks[0]["slots"][:2], f"accum {accum}: rank {rank} differs from rank 0"
    table = np.frombuffer(ranks[0]["slots"][0], dtype=np.float32)
    assert (table != 0).any()  # the zero-initialised table trained


def _compiled_and_eager(rank: int, world_size: int) -> dict[str, tuple[bytes, str, int]]:
    return {"compiled": _train(rank, world_size, 2, slots=True, compile=True),
            "eager": _train(rank, world_size, 2, slots=True, compile=False)}


def test_compiled_ddp_training_forward_has_no_graph_break_and_matches_eager() -> None:
    """The real wrapping (DDP around the compiled model, gloo, 2 ranks) and accumulation over 2 micro-batches:
    no graph break anywhere in the forward, no recompile between micro-batches or steps, eager's numbers."""
    for rank, out in enumerate(run_ranks(_compiled_and_eager, 2)):
        assert out["compiled"][2] == 0, f"rank {rank}: {out['compiled'][2]} graph breaks"
        compiled = np.frombuffer(out["compiled"][0], dtype=np.float32)
        eager = np.frombuffer(out["eager"][0], dtype=np.float32)
        # sign descent: a row moves by +-lr whatever the gradient's size, so Inductor's rounding shows only
        # where a summed gradient is ~0; every row agreeing (to fp32 rounding of the decay) is the bar
        np.testing.assert_allclose(compiled, eager, rtol=1e-5, atol=1e-6)
