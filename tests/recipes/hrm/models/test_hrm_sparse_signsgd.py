"""Sparse SignSGD on the puzzle table: same table at any world size, only touched rows move."""

from __future__ import annotations

import numpy as np
import torch

from distlab.recipes.hrm.models import SparsePuzzleEmbedding
from distlab.recipes.hrm.optim import SparseSignSGD
from mp import run_ranks

NUM_IDS, DIM, LR, WD = 12, 5, 0.01, 0.1
# Global batch of 8; id 3 appears twice (on different ranks when split) with opposite-sign
# gradients of different size, so per-id gradients must be summed before taking the sign.
GLOBAL_IDS = torch.tensor([3, 7, 1, 9, 3, 0, 7, 11])


def _targets() -> torch.Tensor:
    g = torch.Generator().manual_seed(5)
    t = torch.randn(len(GLOBAL_IDS), DIM, generator=g)
    t[4] = -3.0 * t[0]
    return t


def _initial_table() -> torch.Tensor:
    return torch.linspace(-1, 1, NUM_IDS * DIM).view(NUM_IDS, DIM)


def one_step(rank: int, world_size: int, path: str = "auto") -> np.ndarray:
    """One training step of a loss that is a sum of per-example terms, on this rank's shard.

    ``path``: ``auto`` (the table is small: one all-reduce of the dense gradient), ``ragged`` (the row-wise
    update with the shape-exchanging gather, the exchange before the all-reduce replaced it) or ``equal``
    (row-wise with the fixed-shape gather). Returns numpy (pickled by value): tensors would travel through
    shared memory that dies with the worker process.
    """
    import distlab.recipes.hrm.optim as optim

    if path != "auto":
        optim.DENSE_UPDATE_ROWS = 0  # this process's module only: each rank is a fresh process
    emb = SparsePuzzleEmbedding(NUM_IDS, DIM, cast_to=torch.float32).train()
    emb.weights.copy_(_initial_table())
    opt = SparseSignSGD(emb, lr=LR, weight_decay=WD, equal_rows=path == "equal")
    shard = len(GLOBAL_IDS) // world_size
    rows = slice(rank * shard, (rank + 1) * shard)
    out = emb(GLOBAL_IDS[rows])
    (out * _targets()[rows]).sum().backward()
    opt.step()
    return emb.weights.numpy().copy()


def test_identical_tables_at_world_sizes_1_2_4() -> None:
    # World size 1 runs in this process: with one rank the optimizer never communicates, so a
    # spawned single-rank group would exercise the same code at the cost of a torch start-up.
    reference = one_step(0, 1)
    for world in (2, 4):
        for rank, table in enumerate(run_ranks(one_step, world)):
            assert table.tobytes() == reference.tobytes(), f"world size {world}, rank {rank} differs"
    assert not np.array_equal(reference, _initial_table().numpy())


def test_every_exchange_gives_the_old_paths_table_at_world_sizes_2_and_4() -> None:
    """The all-reduced dense gradient and the fixed-shape gather each equal the ragged gather they replace."""
    for world in (2, 4):
        old = run_ranks(one_step, world, "ragged")
        assert all(t.tobytes() == old[0].tobytes() for t in old)
        for path in ("auto", "equal"):
            for rank, table in enumerate(run_ranks(one_step, world, path)):
                assert table.tobytes() == old[0].tobytes(), f"{path} at world size {world}, rank {rank}"
    assert not np.array_equal(old[0], _initial_table().numpy())


def test_update_rule_on_touched_rows_only() -> None:
    new = torch.from_numpy(one_step(0, 1))
    old = _initial_table()
    grad = torch.zeros(NUM_IDS, DIM).index_add_(0, GLOBAL_IDS, _targets())
    touched = torch.zeros(NUM_IDS, dtype=torch.bool)
    touched[GLOBAL_IDS] = True
    expected = old * (1 - LR * WD) - LR * torch.sign(grad)
    torch.testing.assert_close(new[touched], expected[touched], rtol=0, atol=1e-7)
    assert torch.equal(new[~touched], old[~touched])
    # id 3: the larger (negated) gradient wins, so the row moves up, not down nor stays
    assert (torch.sign(grad[3]) == -torch.sign(_targets()[0])).all()


def test_eval_and_no_grad_forwards_queue_nothing() -> None:
    emb = SparsePuzzleEmbedding(NUM_IDS, DIM, cast_to=torch.bfloat16)
    opt = SparseSignSGD(emb, lr=LR, weight_decay=WD)
    with torch.no_grad():
        emb.train()(GLOBAL_IDS)
    assert emb.eval()(GLOBAL_IDS).dtype == torch.bfloat16
    before = emb.weights.clone()
    opt.step()
    assert torch.equal(before, emb.weights)
    assert isinstance(emb.weights, torch.Tensor) and not isinstance(emb.weights, torch.nn.Parameter)
    assert "weights" in emb.state_dict() and not list(emb.parameters())


def test_dense_small_table_update_equals_the_row_wise_one(monkeypatch) -> None:
    import distlab.recipes.hrm.optim as optim

    dense = one_step(0, 1)  # 12 rows: the dense, sync-free path
    monkeypatch.setattr(optim, "DENSE_UPDATE_ROWS", 0)
    row_wise = one_step(0, 1)
    assert dense.tobytes() == row_wise.tobytes()
