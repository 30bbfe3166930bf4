"""Easy sudokus with an exact number of blanks (for CPU demos)."""

import numpy as np
import pytest

from distlab.errors import DistlabError
from distlab.recipes.hrm.data import sudoku as sd
from distlab.recipes.hrm.data.cli import main
from distlab.recipes.hrm.data.format import load_split
from distlab.recipes.hrm.data.sudoku_generate import generate_puzzles
from distlab.recipes.hrm.data.sudoku_solver import solve


@pytest.mark.parametrize("blanks", [1, 20, 55])
def test_exact_blanks_unique_and_effort_measured(blanks):
    puzzles = generate_puzzles(12, seed=3, blanks=blanks)
    assert len(puzzles) == 12 and len({tuple(p) for p, _, _ in puzzles}) == 12
    for p, s, e in puzzles:
        res = solve(p)
        assert p.count(0) == blanks and res.unique and res.solution == s and e == res.guesses
        assert all(v == 0 or v == s[i] for i, v in enumerate(p))
    if blanks == 55:  # near the uniqueness limit some puzzles need guesses: effort is still measured
        assert max(e for _, _, e in puzzles) > 0


def test_blanks_deterministic_from_seed():
    a = generate_puzzles(6, seed=11, blanks=30)
    assert a == generate_puzzles(6, seed=11, blanks=30)
    assert a == generate_puzzles(6, seed=11, blanks=30, workers=2)
    assert a != generate_puzzles(6, seed=12, blanks=30)
    # same seed, different count of blanks: the same solutions are thinned differently
    b = generate_puzzles(6, seed=11, blanks=31)
    assert [s for _, s, _ in a] == [s for _, s, _ in b] and all(p.count(0) == 31 for p, _, _ in b)


def test_build_and_cli_with_blanks(tmp_path):
    counts = sd.build_sudoku(tmp_path / "b", train_size=5, test_size=3, blanks=12, seed=1, verbose=False)
    assert counts == {"train": 5, "test": 3}
    for split in ("train", "test"):
        s = load_split(tmp_path / "b", split)
        x, y, _ = s.example_arrays()
        assert np.all((np.asarray(x) == 1).sum(1) == 12)  # token 1 = blank
        effort = [solve(sd.decode(row).reshape(-1).tolist()).guesses for row in x]
        assert s.difficulty.tolist() == effort  # min-difficulty defaulted to 0, so easy ones are kept
    main(["sudoku", "--output-dir", str(tmp_path / "c"), "--train-size", "2", "--test-size", "2",
          "--blanks", "7", "--workers", "1", "--seed", "1"])
    x, _, _ = load_split(tmp_path / "c", "train").example_arrays()
    assert np.all((np.asarray(x) == 1).sum(1) == 7)


def test_blanks_bad_values_raise(tmp_path):
    for bad in (0, 65):
        with pytest.raises(DistlabError, match="--blanks"):
            generate_puzzles(1, seed=0, blanks=bad)
    with pytest.raises(DistlabError, match="--blanks only applies"):
        sd.build_sudoku(tmp_path, source=str(tmp_path), blanks=5, verbose=False)
    with pytest.raises(DistlabError, match="exactly 63 blanks"):
        generate_puzzles(1, seed=0, blanks=63, max_attempts=16)
