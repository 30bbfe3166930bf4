import time
from pathlib import Path

import pytest
import torch

from distlab.errors import DistlabError
from distlab.runtime.dist import Runtime, detect_env, init_runtime
from mp import run_ranks


def _late_rank(rank, world_size, marker):
    rt = init_runtime("gloo", "cpu", timeout_s=3)
    marker = Path(marker)
    if rank == 1:
        # stay away until rank 0 has given up (or a minute passes): rank 0's error can then only come from
        # its own timeout, never from this rank arriving or exiting, however slow the machine is
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return marker.exists()
    t0 = time.monotonic()
    try:
        rt.barrier("step 7 gradient sync")
        result = "no error", time.monotonic() - t0
    except DistlabError as exc:
        result = str(exc), time.monotonic() - t0
    marker.touch()
    return result


def test_missing_rank_fails_within_timeout_naming_it(tmp_path):
    (msg, waited), rank1_was_still_away = run_ranks(_late_rank, 2, str(tmp_path / "rank0-gave-up"))
    assert "rank(s) 1" in msg and "step 7 gradient sync" in msg and "\n" not in msg
    assert rank1_was_still_away  # the failure came from the timeout while rank 1 was missing
    assert waited >= 2.5  # and not before the 3 s timeout (a lower bound: a busy machine cannot break it)


def _reduce(rank, world_size):
    rt = init_runtime("gloo", "cpu")
    # uneven final batch: rank 0 has 3 examples with 2 right, rank 1 has 1 example with 1 right
    sums = [{"correct": 2.0, "count": 3.0}, {"correct": 1.0, "count": 1.0}][rank]
    tot = rt.reduce_sums(sums)
    return tot["correct"] / tot["count"]


def test_metric_reduction_is_exact_with_uneven_batches():
    assert run_ranks(_reduce, 2) == [pytest.approx(0.75)] * 2  # not the mean of 2/3 and 1/1


def _verify(rank, world_size, same):
    rt = init_runtime("gloo", "cpu")
    torch.manual_seed(0 if same else rank)
    try:
        rt.verify_identical(torch.nn.Linear(3, 3))
        return "ok"
    except DistlabError as exc:
        return str(exc)


def test_identical_init_is_verified():
    assert run_ranks(_verify, 2, True) == ["ok", "ok"]
    assert all("rank(s) [1]" in r for r in run_ranks(_verify, 2, False))


def test_env_detection_torchrun_slurm_single():
    e = detect_env({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"})
    assert (e.rank, e.local_rank, e.world_size, e.launcher) == (3, 1, 8, "torchrun")
    e = detect_env({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_STEP_ID": "0"})
    assert (e.rank, e.local_rank, e.world_size, e.launcher) == (5, 1, 8, "slurm")
    # inside an sbatch script but not an srun step: a single process that may launch torchrun itself
    assert detect_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}).launcher == "single"
    assert detect_env({}).world_size == 1


def test_cuda_request_without_gpu_is_clear():
    if torch.cuda.is_available():
        pytest.skip("has a GPU")
    with pytest.raises(DistlabError, match="no CUDA device"):
        init_runtime("auto", "cuda")


def test_per_rank_seeds_differ():
    a, b = Runtime(rank=0), Runtime(rank=1)
    assert a.seed_everything(7, per_rank=True) != b.seed_everything(7, per_rank=True)
    assert a.seed_everything(7) == b.seed_everything(7)


RAGGED_LENGTHS = {2: [3, 0], 3: [2, 0, 4]}


def _rows(rank: int, n: int) -> torch.Tensor:
    """Rank r's ``n`` rows of width 2: (rank, row index), so the gathered order is checkable."""
    return torch.tensor([[float(rank), float(i)] for i in range(n)], dtype=torch.float64).reshape(n, 2)


def _ragged(rank, world_size):
    rt = init_runtime("gloo", "cpu")
    lengths = RAGGED_LENGTHS[world_size]
    rows = rt.all_gather_ragged(_rows(rank, lengths[rank]))
    flat = rt.all_gather_ragged(torch.arange(lengths[rank], dtype=torch.long) + 100 * rank)  # 1-D, integer
    nobody = rt.all_gather_ragged(torch.zeros(0, 3))
    try:
        rt.all_gather_ragged(torch.zeros(1, 2 + rank))  # trailing shapes differ: every rank must raise
        mismatch = "no error"
    except DistlabError as exc:
        mismatch = str(exc)
    pg = Runtime.from_process_group("cpu")  # the same place in the job, read from the existing group
    assert (pg.rank, pg.world_size, pg.backend, pg.distributed) == (rank, world_size, "gloo", True)
    # plain lists: tensors sent back through torch.multiprocessing would share memory with an exited process
    return (rows.tolist(), str(rows.dtype)), (flat.tolist(), str(flat.dtype)), tuple(nobody.shape), mismatch


@pytest.mark.parametrize("world_size", [2, 3])
def test_all_gather_ragged_concatenates_unequal_lengths_in_rank_order(world_size):
    lengths = RAGGED_LENGTHS[world_size]
    want = torch.cat([_rows(r, n) for r, n in enumerate(lengths)])
    want_flat = torch.cat([torch.arange(n) + 100 * r for r, n in enumerate(lengths)])
    for rows, flat, nobody, mismatch in run_ranks(_ragged, world_size):
        assert rows == (want.tolist(), "torch.float64")
        assert flat == (want_flat.tolist(), "torch.int64")
        assert nobody == (0, 3)
        assert "disagree beyond the first dimension" in mismatch and "rank 1: (1, 3)" in mismatch


def test_all_gather_ragged_alone_returns_the_input():
    t = torch.ones(4, 2)
    assert Runtime().all_gather_ragged(t) is t
    alone = Runtime.from_process_group("cpu")  # no process group: a single process
    assert (alone.world_size, alone.distributed) == (1, False) and alone.all_gather_ragged(t) is t
    with pytest.raises(DistlabError, match="scalar"):
        Runtime().all_gather_ragged(torch.tensor(1.0))


def _sum(rank, world_size):
    rt = init_runtime("gloo", "cpu")
    counts = torch.tensor([rank + 1, 10 * (rank + 1)], dtype=torch.int64)  # ranks hold different counts
    moments = torch.tensor([[0.5 * (rank + 1)]], dtype=torch.float64)
    total, summed = rt.all_reduce_sum(counts), rt.all_reduce_sum(moments)
    return (total.tolist(), total.dtype, summed.tolist(), summed.device.type, counts.tolist())


def test_all_reduce_sum_adds_over_ranks_and_leaves_the_input():
    results = run_ranks(_sum, 2)
    for rank, (total, dtype, summed, device, mine) in enumerate(results):
        assert total == [3, 30] and dtype == torch.int64
        assert summed == [[1.5]] and device == "cpu"
        assert mine == [rank + 1, 10 * (rank + 1)]  # the caller's tensor is not overwritten


def test_all_reduce_sum_alone_is_a_copy():
    x = torch.tensor([1.0, 2.0])
    y = Runtime().all_reduce_sum(x)
    y += 1
    assert x.tolist() == [1.0, 2.0] and y.tolist() == [2.0, 3.0]


def _broadcast(rank, world_size):
    rt = init_runtime("gloo", "cpu")
    weights = torch.full((2, 3), float(rank + 1))
    same = rt.broadcast_(weights, src=1)
    return weights.tolist(), same is weights


def test_broadcast_overwrites_in_place_with_the_source_ranks_copy():
    assert run_ranks(_broadcast, 2) == [([[2.0] * 3] * 2, True)] * 2


def _equal_gather(rank, world_size):
    rt = Runtime.from_process_group(torch.device("cpu"))
    rows = rt.all_gather_equal(torch.full((2, 3), float(rank)))
    ids = rt.all_gather_equal(torch.arange(2, dtype=torch.long) + 10 * rank)
    return rows.numpy(), ids.numpy()


@pytest.mark.parametrize("world_size", [2, 3])
def test_all_gather_equal_concatenates_in_rank_order(world_size):
    for rows, ids in run_ranks(_equal_gather, world_size):
        assert rows.shape == (2 * world_size, 3)
        assert rows[:, 0].tolist() == [float(r) for r in range(world_size) for _ in range(2)]
        assert ids.tolist() == [10 * r + i for r in range(world_size) for i in range(2)]


def _flags_over_side_group(rank, world_size):
    import torch.distributed as dist

    rt = Runtime.from_process_group(torch.device("cpu"))
    rt._monitor = dist.new_group(backend="gloo")  # as an NCCL job holds one: the flags must travel over it
    return rt.any_flags(rank == 1, False, rank == 0)


def test_any_flags_travel_over_the_cpu_side_group():
    assert run_ranks(_flags_over_side_group, 3) == [(True, False, True)] * 3


def _subgroup(rank, world_size):
    world = Runtime.from_process_group(torch.device("cpu"))
    pair = world.subgroup([1, 2])  # a collective: rank 0 calls it too and gets None
    if pair is None:
        world.send_object({"from": 0}, dst=2)
        return None
    sums = pair.reduce_sums({"x": float(rank)})
    told = pair.broadcast_object(f"said by job rank {rank}", src=0)  # group rank 0 is job rank 1
    weights = pair.broadcast_(torch.full((2,), float(rank)), src=1)  # group rank 1 is job rank 2
    got = world.recv_object(src=0) if rank == 2 else None
    return pair.rank, pair.world_size, sums["x"], told, weights.tolist(), pair.all_gather_object(rank), got


def test_a_subgroup_runs_its_collectives_over_its_own_ranks_only():
    assert run_ranks(_subgroup, 3) == [
        None,
        (0, 2, 3.0, "said by job rank 1", [2.0, 2.0], [1, 2], None),
        (1, 2, 3.0, "said by job rank 1", [2.0, 2.0], [1, 2], {"from": 0})]


def test_subgroup_ranks_must_be_distinct_and_in_range():
    with pytest.raises(DistlabError, match="ascending and below 1"):
        Runtime().subgroup([0, 0])


def _splits_under_a_bound_default_group(rank, world_size):
    """The no-colour splits a rank outside a subgroup makes when the default group is bound to a device, as
    ``init_runtime`` binds an NCCL one, recorded on gloo: the default group is bound to a stand-in device, torch's
    split source is a recorder, and each group is built without the device (a gloo group refuses one)."""
    import dataclasses

    import torch.distributed.distributed_c10d as c10d

    splits = []

    class Recorder:
        supports_splitting = True

        def perform_nocolor_split(self, device):
            splits.append(str(device))

    helper, source = c10d._new_process_group_helper, c10d._get_split_source

    def without_device(*args, **kwargs):
        return helper(*args, **{**kwargs, "device_id": None})

    world = Runtime.from_process_group(torch.device("cpu"))
    world = dataclasses.replace(world, backend="nccl")  # so subgroup makes the gloo twin it makes under NCCL
    default = c10d._get_default_group()
    c10d._new_process_group_helper, c10d._get_split_source = without_device, lambda pg: Recorder()
    default.bound_device_id = torch.device("cpu", 0)
    try:
        trainers = world.subgroup([0])
        both = world.subgroup([0, 1])
        bound_after = default.bound_device_id
    finally:
        c10d._new_process_group_helper, c10d._get_split_source = helper, source
        default.bound_device_id = None
    got = both.broadcast_object(f"from {rank}", src=0)  # the gloo twin works for its members
    return splits, trainers is None, str(bound_after), got


def test_a_subgroup_asks_non_members_for_one_split_only():
    """Rank 1 is outside the trainers' group: one split, for its NCCL group (rank 0's split of that group matches
    it), none for the gloo twin, and the default group stays bound. On the code before, rank 1 split twice and
    waited for a second split no one made: the 2-GPU job split into roles hung at start."""
    assert run_ranks(_splits_under_a_bound_default_group, 2) == [
        ([], False, "cpu:0", "from 0"), (["cpu:0"], True, "cpu:0", "from 0")]
