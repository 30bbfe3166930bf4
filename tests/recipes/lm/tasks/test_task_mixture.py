"""A training mixture of task sources (``task.train=mbpp+synthetic+mbpp:docstring``): its shares of an epoch, its
seeded draw, and a data order that 1, 2 and 4 ranks see alike."""

from collections import Counter

import numpy as np
import pytest

from distlab.errors import DistlabError
from distlab.recipes.lm.config import TaskConfig
from distlab.recipes.lm.tasks.mixture import shares
from distlab.recipes.lm.tasks.select import eval_tasks, train_tasks
from distlab.runtime.sampler import GlobalBatchSampler

MIX = "mbpp+synthetic+mbpp:docstring"


def _component(task_id: str) -> str:
    """Which source of MIX a task came from (synthetic ids are family/index)."""
    head = task_id.split("/")[0]
    return head if head in ("mbpp", "mbpp-docstring") else "synthetic"


def _cfg(mbpp_dir, **kw) -> TaskConfig:
    return TaskConfig(**{"train": MIX, "mbpp_dir": str(mbpp_dir), **kw})


def test_shares_are_proportional_sum_to_the_epoch_and_give_each_source_one():
    assert shares([374, 512, 374], [2, 1, 1]) == [630, 315, 315]
    assert shares([3, 3, 4], [1, 1, 1]) == [4, 3, 3]  # 3.33 each: the largest remainder (ties: first) gets the 10th
    assert shares([100, 1], [1, 1000]) == [1, 100]  # a tiny weight still leaves its source one task
    assert sum(shares([7, 11, 13], [0.3, 0.5, 0.2])) == 31


def test_without_weights_every_task_appears_once(mbpp_dir):
    mixed = train_tasks(_cfg(mbpp_dir, train_size=20))
    assert Counter(_component(t.task_id) for t in mixed) == {"mbpp": 20, "synthetic": 20, "mbpp-docstring": 20}
    assert len({t.task_id for t in mixed}) == 60


def test_weights_set_each_sources_share_repeating_small_sources_only_after_all_are_used(mbpp_dir):
    mixed = train_tasks(_cfg(mbpp_dir, train_size=40, train_weights="2,1,1"))
    assert len(mixed) == 120
    assert Counter(_component(t.task_id) for t in mixed) == {"mbpp": 60, "synthetic": 30, "mbpp-docstring": 30}
    uses = Counter(t.task_id for t in mixed if _component(t.task_id) == "mbpp")
    assert len(uses) == 40 and set(uses.values()) == {1, 2}  # all 40 once, then 20 of them again
    sub = [t.task_id for t in mixed if _component(t.task_id) == "synthetic"]
    assert len(set(sub)) == 30  # a subsampled source never repeats a task


def test_the_mixture_is_seeded_by_the_config_alone(mbpp_dir):
    ids = [[t.task_id for t in train_tasks(_cfg(mbpp_dir, train_size=40, train_weights="1,4,1", seed=s))]
           for s in (0, 0, 1)]
    assert ids[0] == ids[1]  # rebuilt in another call (as every rank does): the same list
    assert ids[0] != ids[2]  # another task.seed draws another subsample


@pytest.mark.parametrize("world_size", [2, 4])
def test_the_global_batches_and_an_epochs_proportions_do_not_depend_on_the_world_size(mbpp_dir, world_size):
    mixed = train_tasks(_cfg(mbpp_dir, train_size=40, train_weights="2,1,1"))
    one = GlobalBatchSampler(len(mixed), 8, 0, 1, seed=3)
    ranks = [GlobalBatchSampler(len(mixed), 8, r, world_size, seed=3) for r in range(world_size)]
    epoch = []
    for _ in range(len(mixed) // 8):  # one epoch: 15 global batches of 8
        whole = one.next()
        assert np.array_equal(whole, np.concatenate([s.next() for s in ranks]))
        epoch += [mixed[i].task_id for i in whole]
    assert Counter(_component(t) for t in epoch) == {"mbpp": 60, "synthetic": 30, "mbpp-docstring": 30}
    first = [_component(mixed[i].task_id) for i in GlobalBatchSampler(len(mixed), 8, 0, 1, seed=3).next()]
    assert len(set(first)) > 1  # interleaved, not source after source


@pytest.mark.parametrize("overrides, message", [
    ({"train": "mbpp++synthetic"}, "has an empty part"),
    ({"train": "mbpp+mbpp"}, "names 'mbpp' twice"),
    ({"train_weights": "1,1"}, "gives 2 weight(s) for 3 source(s)"),
    ({"train_weights": "1,x,1"}, "is not a comma-separated list of numbers"),
    ({"train_weights": "1,0,1"}, "every weight must be a finite number above 0"),
    ({"train": "mbpp+mbpp:plain"}, "unknown MBPP prompt style 'plain'"),
])
def test_bad_mixtures_are_refused_in_one_line(mbpp_dir, overrides, message):
    with pytest.raises(DistlabError) as err:
        train_tasks(_cfg(mbpp_dir, train_size=4, **overrides))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_evaluation_reads_one_set(mbpp_dir):
    with pytest.raises(DistlabError, match="evaluation reads one set"):
        eval_tasks(TaskConfig(eval="humaneval+mbpp", eval_split="test", mbpp_dir=str(mbpp_dir)))


def test_a_task_file_whose_path_holds_a_plus_is_one_source(tmp_path):
    """A folder such as ``c++/`` (or a notebook's ``tasks=`` file written under it) is a path, not a mixture."""
    folder = tmp_path / "c++"
    folder.mkdir()
    path = folder / "tasks.jsonl"
    path.write_text('{"prompt": "Return 1.", "tests": "assert f() == 1", "entry_point": "f"}\n')
    cfg = TaskConfig(train=str(path), eval=str(path))
    assert [t.prompt for t in train_tasks(cfg)] == ["Return 1."]
    assert [t.prompt for t in eval_tasks(cfg)] == ["Return 1."]
