import numpy as np
import pytest

from distlab.errors import DistlabError
from distlab.runtime.epoch_order import ExampleGroups
from distlab.runtime.sampler import GlobalBatchSampler, check_divisible, eval_shard
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


# ----------------------------------------------------------------------------- group-balanced epochs

def _groups(sizes_per_group, member_size=1):
    """ExampleGroups with groups of the given member counts, each member ``member_size`` examples
    (or a list of member sizes per group)."""
    group_offsets, member_offsets = [0], [0]
    for g, n_members in enumerate(sizes_per_group):
        for m in range(n_members):
            size = member_size[g][m] if isinstance(member_size, list) else member_size
            member_offsets.append(member_offsets[-1] + size)
        group_offsets.append(group_offsets[-1] + n_members)
    return ExampleGroups(np.array(group_offsets), np.array(member_offsets))


def _group_of(groups, example):
    member = np.searchsorted(groups.member_offsets, example, side="right") - 1
    return np.searchsorted(groups.group_offsets, member, side="right") - 1


def test_group_epoch_visits_every_group_once_through_one_member():
    groups = ExampleGroups.one_example_members(np.arange(0, 10 * 50 + 1, 50))  # 10 puzzles x 50 augmentations
    s = GlobalBatchSampler(500, 5, 0, 1, seed=0, groups=groups)
    for epoch in range(3):
        batch = np.concatenate([s.next() for _ in range(2)])  # one epoch = 10 examples, not 500
        assert sorted(_group_of(groups, batch).tolist()) == list(range(10))
        assert s.epoch == epoch + 1
    assert s.state_dict()["epoch"] == 3


def test_group_members_are_drawn_uniformly():
    from scipy import stats

    groups = ExampleGroups.one_example_members(np.array([0, 7, 10]))  # groups of 7 and 3 augmentations
    picks = np.stack([groups.epoch(seed=1, epoch=e) for e in range(3000)])
    first = picks[picks < 7]
    second = picks[picks >= 7]
    assert len(first) == len(second) == 3000
    assert stats.chisquare(np.bincount(first, minlength=7)).pvalue > 1e-3
    assert stats.chisquare(np.bincount(second - 7, minlength=3)).pvalue > 1e-3
    order_first = picks[:, 0] < 7  # the group order is a fair permutation too
    assert stats.binomtest(int(order_first.sum()), 3000, 0.5).pvalue > 1e-3


def test_multi_example_members_come_whole_and_epochs_vary_in_length():
    groups = _groups([2, 1, 3], member_size=[[1, 4], [2], [3, 1, 2]])  # 13 examples in 6 members
    lengths = set()
    for e in range(40):
        order = groups.epoch(seed=2, epoch=e)
        members = np.searchsorted(groups.member_offsets, order, side="right") - 1
        assert sorted(set(_group_of(groups, order).tolist())) == [0, 1, 2] and len(set(members)) == 3
        for m in set(members.tolist()):  # every example of a drawn member, contiguously
            where = np.flatnonzero(members == m)
            assert where.tolist() == list(range(where[0], where[0] + len(where)))
            assert sorted(order[where].tolist()) == list(range(groups.member_offsets[m], groups.member_offsets[m + 1]))
        lengths.add(len(order))
    assert len(lengths) > 2 and groups.fixed_epoch_length is None


def _grouped_batches(rank, world_size, steps, resume_at):
    import torch.distributed as dist

    groups = _groups([2, 1, 3, 1, 2], member_size=[[1, 4], [2], [3, 1, 2], [1], [2, 2]])

    def fresh():
        return GlobalBatchSampler(groups.num_examples, 4, rank, world_size, seed=3, groups=groups)

    s, out = fresh(), []
    for step in range(steps):
        if step == resume_at:
            state = s.state_dict()
            s = fresh()
            s.load_state_dict(state)
        parts = [None] * world_size
        dist.all_gather_object(parts, s.next().tolist())
        out.append(sum(parts, []))
    return out


def _grouped_single(steps):
    groups = _groups([2, 1, 3, 1, 2], member_size=[[1, 4], [2], [3, 1, 2], [1], [2, 2]])
    s = GlobalBatchSampler(groups.num_examples, 4, 0, 1, seed=3, groups=groups)
    return [s.next().tolist() for _ in range(steps)]


@pytest.mark.parametrize("world", [2, 4])
def test_grouped_order_same_at_any_world_size_and_resumes_mid_epoch(world):
    ref = _grouped_single(20)  # epochs of 5 to 11 examples: 20 batches of 4 cross several
    assert run_ranks(_grouped_batches, world, 20, 9)[0] == ref


def test_grouped_resume_from_state_alone_on_another_world_size():
    groups = _groups([2, 1, 3, 1, 2], member_size=[[1, 4], [2], [3, 1, 2], [1], [2, 2]])
    ref = _grouped_single(20)
    s1 = GlobalBatchSampler(groups.num_examples, 4, 0, 1, seed=3, groups=groups)
    for _ in range(13):
        s1.next()
    state = s1.state_dict()
    assert state["epoch"] >= 3 and 0 < state["position"] - state["epoch_start"]
    ranks = [GlobalBatchSampler(groups.num_examples, 4, r, 2, seed=3, groups=groups) for r in range(2)]
    for s in ranks:
        s.load_state_dict(state)
    got = [ranks[0].next().tolist() + ranks[1].next().tolist() for _ in range(7)]
    assert got == ref[13:]
    s2 = GlobalBatchSampler(groups.num_examples, 4, 0, 1, seed=3, groups=groups)  # a cursor-less state walks
    s2.load_state_dict({k: v for k, v in state.items() if k not in ("epoch", "epoch_start")})
    assert s2.next().tolist() == ref[13]


def test_old_per_example_checkpoint_refused_by_grouped_sampler_and_resumed_by_example_one():
    old = {"position": 16, "seed": 3, "num_examples": 500}  # written before grouped epochs existed
    groups = ExampleGroups.one_example_members(np.arange(0, 501, 50))
    with pytest.raises(DistlabError, match="visits examples per epoch, this run visits groups.*sampling=examples"):
        GlobalBatchSampler(500, 8, groups=groups).load_state_dict(old)
    plain = GlobalBatchSampler(500, 8, seed=3)
    plain.load_state_dict(old)
    assert plain.next().tolist() == np.random.default_rng([3, 0]).permutation(500)[16:24].tolist()
    other = GlobalBatchSampler(500, 8, groups=ExampleGroups.one_example_members(np.arange(0, 501, 100)))
    with pytest.raises(DistlabError, match="10 groups, this one has 5"):
        other.load_state_dict(GlobalBatchSampler(500, 8, groups=groups).state_dict())


def test_bad_group_offsets_are_one_line_errors():
    with pytest.raises(DistlabError, match="group offsets must start at 0"):
        ExampleGroups(np.array([0, 2, 2]), np.arange(3))
    with pytest.raises(DistlabError, match="groups cover 10 examples but the dataset has 11"):
        GlobalBatchSampler(11, 2, groups=ExampleGroups.one_example_members(np.array([0, 5, 10])))


def test_the_last_batch_digest_names_the_global_batch_on_any_world_size():
    one = GlobalBatchSampler(100, 8, seed=3)
    halves = [GlobalBatchSampler(100, 8, rank=r, world_size=2, seed=3) for r in range(2)]
    assert one.last_batch_digest() == "" == halves[0].last_batch_digest()
    seen = []
    for _ in range(30):  # past several epochs
        one.next()
        for h in halves:
            h.next()
        seen.append(one.last_batch_digest())
        assert halves[0].last_batch_digest() == halves[1].last_batch_digest() == seen[-1]
    assert len(set(seen)) == 30 and all(len(d) == 8 for d in seen)
    again = GlobalBatchSampler(100, 8, seed=3)
    again.load_state_dict(one.state_dict())
    assert again.last_batch_digest() == seen[-1]
    assert GlobalBatchSampler(100, 8, seed=4, position=8).last_batch_digest() != seen[0]  # another order
