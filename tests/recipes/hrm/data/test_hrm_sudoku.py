"""Sudoku solver, augmentations, generator and importers."""

import csv
import random
from pathlib import Path

import numpy as np
import pytest

from distlab.recipes.hrm.data import sudoku as sd
from distlab.recipes.hrm.data.format import load_split
from distlab.recipes.hrm.data.sudoku_generate import HARD_EFFORT, generate_one, generate_puzzles
from distlab.recipes.hrm.data.sudoku_solver import effort, is_valid_solution, random_solution, solve

DATA = Path(__file__).resolve().parents[4] / ".." / "shared" / "data" / "sudoku"
needs_top95 = pytest.mark.skipif(not (DATA / "top95.txt").exists(), reason="shared sudoku data absent")


@pytest.fixture(scope="module")
def solved():
    return np.array(random_solution(random.Random(7)), dtype=np.uint8).reshape(9, 9)


@pytest.mark.parametrize("aug", sd.AUGMENTATIONS + (sd.transpose,))
def test_each_augmentation_keeps_validity_and_inverts(aug, solved):
    rng = np.random.default_rng(1)
    out, t = aug(solved, rng)
    assert is_valid_solution(out.reshape(-1).tolist())
    assert np.array_equal(t.inverse().apply(out), solved)


def test_composed_augmentation_moves_cells_and_inverts(solved):
    rng = np.random.default_rng(2)
    puzzle = solved.copy()
    puzzle[np.arange(9), np.arange(9)] = 0
    for _ in range(20):
        t = sd.random_transform(rng)
        p2, s2 = t.apply(puzzle), t.apply(solved)
        assert is_valid_solution(s2.reshape(-1).tolist())
        assert np.array_equal((p2 == 0).reshape(-1), puzzle.reshape(-1)[list(t.cells)] == 0)
        assert np.all((p2 == 0) | (p2 == s2))  # clues stay consistent with the solution
        assert np.array_equal(t.inverse().apply(p2), puzzle)
    assert not np.array_equal(sd.random_transform(rng).apply(solved), solved)


@needs_top95
def test_solver_top95_unique_and_matches_solutions():
    rows = list(csv.DictReader(open(DATA / "top95_solved.csv")))
    assert len(rows) == 95
    for r in rows:
        res = solve(sd.parse_grid(r["puzzle"]))
        assert res.num_solutions == 1
        assert "".join(map(str, res.solution)) == r["solution"]


def test_solver_counts_multiple_and_no_solutions(solved):
    flat = solved.reshape(-1).tolist()
    assert solve([0] * 81).num_solutions == 2
    bad = list(flat)
    bad[0], bad[1] = bad[1], bad[0]
    assert solve(bad).num_solutions == 0


def test_generator_unique_and_deterministic_across_workers():
    one = generate_puzzles(5, seed=5, min_difficulty=2, workers=1)
    two = generate_puzzles(5, seed=5, min_difficulty=2, workers=2)
    assert one == two
    for p, s, e in one:
        res = solve(p)
        assert res.unique and res.solution == s and e == res.guesses >= 2
        assert all(v == 0 or v == s[i] for i, v in enumerate(p))
    assert generate_puzzles(5, seed=6, min_difficulty=2) != one


@needs_top95
def test_difficulty_ordering_top95_harder_than_easy_generated():
    top = [effort(sd.parse_grid(line)) for line in (DATA / "top95.txt").read_text().split()]
    easy = [generate_one(9, 0, k, min_clues=40)[2] for k in range(20)]
    assert max(easy) < min(top) and min(top) >= HARD_EFFORT
    assert np.median(top) > 10 * max(1, np.median(easy))


@needs_top95
def test_build_from_txt_and_csv(tmp_path):
    counts = sd.build_sudoku(tmp_path / "txt", source=str(DATA / "top95.txt"), test_size=15, train_size=None,
                             num_aug=2, seed=0, verbose=False)
    assert counts == {"train": 80 * 3, "test": 15}
    tr = load_split(tmp_path / "txt", "train")
    inputs, labels, _ = tr.example_arrays()
    assert inputs.min() >= 1 and inputs.max() <= 10 and labels.min() >= 2
    assert tr.sets["all"].group_indices[-1] == 240 and len(tr.sets["all"].group_indices) == 81
    # a Sudoku-Extreme style CSV: the rating column is the difficulty and filters
    rows = list(csv.DictReader(open(DATA / "top95_solved.csv")))
    path = tmp_path / "x.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["source", "q", "a", "rating"])
        for k, r in enumerate(rows):
            w.writerow(["top95", r["puzzle"], r["solution"], k])
    sd.build_sudoku(tmp_path / "csv", source=str(path), min_difficulty=50, test_size=5, train_size=None,
                    verbose=False, seed=1)
    d = np.concatenate([load_split(tmp_path / "csv", s).difficulty for s in ("train", "test")])
    assert sorted(d.tolist()) == list(range(50, 95))
    x, y, _ = load_split(tmp_path / "csv", "test").example(0)
    s = sd.decode(y).reshape(-1)
    assert is_valid_solution(s.tolist()) and np.all((sd.decode(x).reshape(-1) == 0) | (sd.decode(x).reshape(-1) == s))
