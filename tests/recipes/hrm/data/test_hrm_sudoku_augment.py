"""Batched Sudoku augmentation: valid, invertible, HRM's distribution, equal to the one-grid transforms."""

import random

import numpy as np
import pytest
from scipy import stats

from distlab.recipes.hrm.data import sudoku as sd
from distlab.recipes.hrm.data import sudoku_augment as sa
from distlab.recipes.hrm.data.sudoku_solver import is_valid_solution, random_solution


@pytest.fixture(scope="module")
def solved():
    return np.array(random_solution(random.Random(11)), dtype=np.uint8)


@pytest.fixture(scope="module")
def puzzle(solved):
    p = solved.copy()
    p[np.random.default_rng(0).random(81) < 0.6] = 0
    return p


def _reference(d: sa.SudokuDraws, n: int) -> sd.SudokuTransform:
    """Transform ``n`` built by composing the one-grid transforms in HRM's order from the same draws."""
    t = sd._positional(transpose=True) if d.transpose[n] else sd.IDENTITY
    steps = [
        sd.SudokuTransform(sd.IDENTITY.cells, tuple([0] + (d.digits[n] + 1).tolist())),
        sd._positional(row_perm=np.concatenate([b * 3 + np.arange(3) for b in d.bands[n]])),
        sd._positional(col_perm=np.concatenate([b * 3 + np.arange(3) for b in d.stacks[n]])),
        sd._positional(row_perm=np.concatenate([b * 3 + d.rows[n, b] for b in range(3)])),
        sd._positional(col_perm=np.concatenate([b * 3 + d.cols[n, b] for b in range(3)])),
    ]
    for step in steps:
        t = t.then(step)
    return t


def test_batched_equals_composed_one_grid_transforms(puzzle, solved):
    d = sa.draw(np.random.default_rng(3), 200)
    cells, digits = sa.tables(d)
    out_p, out_s = sa.apply(puzzle, cells, digits), sa.apply(solved, cells, digits)
    for n in range(len(d)):
        ref = _reference(d, n)
        assert cells[n].tolist() == list(ref.cells) and digits[n].tolist() == list(ref.digits)
        assert np.array_equal(out_p[n], ref.apply(puzzle)) and np.array_equal(out_s[n], ref.apply(solved))


def test_every_augmented_grid_valid_consistent_and_inverts(puzzle, solved):
    out_p, out_s = sa.augment(puzzle, solved, np.random.default_rng(4), 2000)
    assert out_p.shape == out_s.shape == (2000, 81) and out_p.dtype == np.uint8
    assert all(is_valid_solution(row.tolist()) for row in out_s)
    assert np.all((out_p == 0) | (out_p == out_s))  # every clue agrees with its solution
    assert np.array_equal((out_p == 0).sum(1), np.full(2000, (puzzle == 0).sum()))  # blanks stay blanks
    cells, digits = sa.tables(sa.draw(np.random.default_rng(4), 2000))
    inv_cells, inv_digits = sa.inverse(cells, digits)
    assert np.array_equal(sa.apply(out_p, inv_cells, inv_digits), np.tile(puzzle, (2000, 1)))
    assert np.array_equal(sa.apply(out_s, inv_cells, inv_digits), np.tile(solved, (2000, 1)))
    assert len({row.tobytes() for row in out_s}) > 1990  # 9! x 6^8 x 2 transforms: collisions are rare


def test_transform_distribution_is_hrms():
    n = 12000
    d = sa.draw(np.random.default_rng(5), n)
    assert stats.binomtest(int(d.transpose.sum()), n, 0.5).pvalue > 1e-3  # transposed half the time
    # each digit lands in each label position uniformly: a chi-square over the 9 x 9 table
    table = np.stack([np.bincount(d.digits[:, pos], minlength=9) for pos in range(9)])
    assert stats.chi2_contingency(table).pvalue > 1e-3 and stats.chisquare(table.ravel()).pvalue > 1e-3
    for name in ("bands", "stacks"):  # all 6 orders of 3 blocks equally likely
        codes = getattr(d, name) @ np.array([9, 3, 1])
        assert stats.chisquare(np.unique(codes, return_counts=True)[1]).pvalue > 1e-3
        assert len(np.unique(codes)) == 6
    for name in ("rows", "cols"):  # and of the 3 lines inside each block, independently per block
        codes = getattr(d, name) @ np.array([9, 3, 1])
        assert stats.chisquare(np.unique(codes[:, 0], return_counts=True)[1]).pvalue > 1e-3
        a, b = (np.unique(codes[:, k], return_inverse=True)[1] for k in (0, 1))
        joint = np.zeros((6, 6))
        np.add.at(joint, (a, b), 1)
        assert stats.chi2_contingency(joint).pvalue > 1e-3


def test_where_a_cell_goes_is_uniform_over_its_orbit():
    """Cell (0, 0) can go anywhere on the grid, uniformly (bands x rows x stacks x cols x transpose)."""
    cells, _ = sa.tables(sa.draw(np.random.default_rng(6), 16200))
    dest = np.argmax(cells == 0, axis=1)
    counts = np.bincount(dest, minlength=81)
    assert counts.min() > 0 and stats.chisquare(counts).pvalue > 1e-3


def test_builder_output_holds_the_original_then_its_augmentations(tmp_path, puzzle, solved):
    from distlab.recipes.hrm.data.format import load_split

    rows = [(puzzle.tolist(), solved.tolist(), 7.0), (solved.tolist(), solved.tolist(), 0.0)]
    sd.write_sudoku_split(tmp_path, "train", rows, 5, np.random.default_rng(0))
    tr = load_split(tmp_path, "train")
    s = tr.sets["all"]
    assert s.group_indices.tolist() == [0, 6, 12] and s.puzzle_indices.tolist() == list(range(13))
    assert tr.metadata.total_groups == 2 and tr.metadata.mean_puzzle_examples == 1.0
    assert np.array_equal(s.inputs[0], puzzle + 1) and np.array_equal(s.labels[6], solved + 1)
    assert s.difficulty.tolist() == [7.0] * 6 + [0.0] * 6
    assert all(is_valid_solution((row - 1).tolist()) for row in s.labels)
