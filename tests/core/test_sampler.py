import numpy as np
import pytest

from distlab.errors import DistlabError
from distlab.sampler import GlobalBatchSampler, check_divisible, eval_shard
from mp import run_ranks


def _global_batches(rank, world_size, n, g, steps, resume_at):
    import torch.distributed as dist

    s = GlobalBatchSampler(n, g, rank, world_size, seed=3)
    out = []
    for step in range(steps):
        if step == resume_at:  # a resumed sampler: new object, state from the old one
            state = s.state_dict()
            s = GlobalBatchSampler(n, g, rank, world_size, seed=3)
            s.load_state_dict(state)
        local = s.next()
        parts = [None] * world_size
        dist.all_gather_object(parts, local.tolist())
        out.append(sorted(sum(parts, [])))
    return out


@pytest.mark.parametrize("world", [2, 4])
def test_same_global_batches_at_any_world_size(world):
    ref = _single(n=50, g=8, steps=15)
    got = run_ranks(_global_batches, world, 50, 8, 15, 7)[0]
    assert got == ref


def _single(n, g, steps):
    s = GlobalBatchSampler(n, g, 0, 1, seed=3)
    return [sorted(s.next().tolist()) for _ in range(steps)]


def test_resume_mid_epoch_on_another_world_size():
    ref = _single(n=50, g=8, steps=12)
    s1 = GlobalBatchSampler(50, 8, 0, 1, seed=3)
    for _ in range(5):
        s1.next()
    state = s1.state_dict()
    got = []
    for _ in range(7):
        parts = []
        for r in range(4):
            s = GlobalBatchSampler(50, 8, r, 4, seed=3)
            s.load_state_dict(state)
            parts += s.next().tolist()
        state["position"] += 8
        got.append(sorted(parts))
    assert got == ref[5:]


def test_epochs_are_permutations_and_seeded():
    s = GlobalBatchSampler(12, 4, 0, 1, seed=0)
    first_epoch = np.concatenate([s.next() for _ in range(3)])
    assert sorted(first_epoch.tolist()) == list(range(12))
    other = GlobalBatchSampler(12, 4, 0, 1, seed=1)
    assert not np.array_equal(first_epoch, np.concatenate([other.next() for _ in range(3)]))


def test_batch_not_divisible_is_one_line():
    with pytest.raises(DistlabError, match="not divisible by world size 3"):
        check_divisible(32, 3)


def test_dataset_size_change_refused():
    s = GlobalBatchSampler(10, 2)
    with pytest.raises(DistlabError, match="dataset"):
        s.load_state_dict({"position": 4, "seed": 0, "num_examples": 11})


@pytest.mark.parametrize("n,world,b", [(10, 3, 2), (7, 4, 4), (3, 4, 1), (100, 2, 16)])
def test_eval_covers_every_example_once(n, world, b):
    seen = []
    counts = set()
    for r in range(world):
        sh = eval_shard(n, b, r, world)
        counts.add(len(sh.indices))
        for idx, m in zip(sh.indices, sh.masks):
            assert len(idx) == b
            seen += idx[m].tolist()
    assert sorted(seen) == list(range(n)) and len(counts) == 1
