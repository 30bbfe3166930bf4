"""Epochs as HRM and TRM count them: group-balanced, so the shipped presets run the published step counts."""

import math

import numpy as np
import pytest

from distlab.config import resolve_config
from distlab.errors import DistlabError
from distlab.recipes.hrm.data.format import PuzzleMetadata, SplitBuilder, load_split
from distlab.recipes.hrm.recipe import RECIPE, validate
from distlab.recipes.hrm.train import make_sampler, total_steps

NUM_AUG = 3  # stands in for HRM's 1,000: the step count must not depend on it


def _write(root, split, groups, num_aug, seq_len=81):
    b = SplitBuilder(seq_len)
    rows = np.random.default_rng(0).integers(1, 11, (groups * (1 + num_aug), seq_len))
    for g in range(groups):
        block = rows[g * (1 + num_aug):(g + 1) * (1 + num_aug)]
        b.add_single_example_puzzles(block, block)
        b.end_group()
    meta = PuzzleMetadata(pad_id=0, ignore_label_id=0, blank_identifier_id=0, vocab_size=11, seq_len=seq_len,
                          num_puzzle_identifiers=1, total_groups=0, mean_puzzle_examples=1.0)
    b.write(root, split, meta)


@pytest.fixture(scope="module")
def sudoku_1k(tmp_path_factory):
    """Sudoku-Extreme-1k's layout: 1,000 groups (original puzzles), each with its augmentations."""
    root = tmp_path_factory.mktemp("sudoku-1k")
    _write(root, "train", 1000, NUM_AUG)
    _write(root, "test", 10, 0)
    return root


# preset -> (published epochs, eval interval, steps = int(epochs x 1000 groups / 768) as in HRM's/TRM's pretrain.py)
PUBLISHED = {"sudoku-extreme-1k": (20000, 2000, 26041), "trm-sudoku": (50000, 5000, 65104)}


@pytest.mark.parametrize("preset", sorted(PUBLISHED))
def test_presets_resolve_to_the_published_step_counts(preset, sudoku_1k):
    epochs, eval_every, steps = PUBLISHED[preset]
    cfg = resolve_config(RECIPE, [preset], [f"data.path={sudoku_1k}"])
    validate(cfg, world_size=1)
    assert (cfg.epochs, cfg.eval_every, cfg.global_batch_size, cfg.sampling) == (epochs, eval_every, 768, "groups")
    split = load_split(sudoku_1k, "train")
    assert split.num_examples == 1000 * (1 + NUM_AUG) and split.examples_per_epoch == 1000
    assert total_steps(cfg, split) == steps
    old = resolve_config(RECIPE, [preset], [f"data.path={sudoku_1k}", "sampling=examples"])
    assert total_steps(old, split) == math.ceil(epochs * 1000 * (1 + NUM_AUG) / 768)  # the old meaning, kept


def test_training_order_visits_each_puzzle_once_per_epoch(sudoku_1k):
    cfg = resolve_config(RECIPE, ["sudoku-extreme-1k"], [f"data.path={sudoku_1k}", "global_batch_size=8"])
    split = load_split(sudoku_1k, "train")
    sampler = make_sampler(cfg, split, rank=0, world_size=1)
    epoch = np.concatenate([sampler.next() for _ in range(125)])  # 1,000 examples
    assert sorted((epoch // (1 + NUM_AUG)).tolist()) == list(range(1000))  # each group exactly once
    assert len(set((epoch % (1 + NUM_AUG)).tolist())) == 1 + NUM_AUG  # through varying members
    assert sampler.epoch == 1.0


def test_unknown_sampling_is_one_line_error(sudoku_1k):
    cfg = resolve_config(RECIPE, ["sudoku-extreme-1k"], [f"data.path={sudoku_1k}", "sampling=puzzles"])
    with pytest.raises(DistlabError, match="sampling='puzzles' is not one of groups, examples"):
        validate(cfg, world_size=1)
