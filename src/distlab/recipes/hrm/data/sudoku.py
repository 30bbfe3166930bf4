"""Sudoku datasets in HRM's format: encoding, augmentations, importers, generator front-end.

Tokens follow HRM's ``build_sudoku_dataset.py``: a cell holding digit ``d`` (0 = blank) becomes
token ``d + 1``; token 0 is padding (never present in a 9x9 grid), ``seq_len`` 81, ``vocab_size``
11. Labels are the solved grid encoded the same way, so ``ignore_label_id`` 0 never hides a cell.

Difficulty is the solver's effort (guesses to solve and prove uniqueness, see
``sudoku_solver``); for Sudoku-Extreme CSVs it is the file's own ``rating`` column (HRM filters
on that column with ``--min-difficulty``). "Hard" generated puzzles have effort >= ``HARD_EFFORT``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from distlab.errors import DistlabError

from . import sudoku_augment
from .format import PuzzleMetadata, SplitBuilder, read_headed_csv, write_identifiers
from .sudoku_generate import HARD_EFFORT, check_blanks, generate_puzzles
from .sudoku_solver import solve

SEQ_LEN = 81
VOCAB_SIZE = 11
__all__ = ["HARD_EFFORT", "SudokuTransform", "build_sudoku", "encode", "decode", "parse_grid"]


# ----------------------------------------------------------------------------- encoding

def parse_grid(text: str) -> list[int]:
    """81 characters, '.' or '0' = blank, row-major."""
    text = text.strip()
    if len(text) != 81 or any(ch not in ".0123456789" for ch in text):
        raise DistlabError(f"a sudoku line must be 81 characters of '.' or 0-9, got {text[:90]!r}")
    return [0 if ch == "." else int(ch) for ch in text]


def encode(grid: list[int] | np.ndarray) -> np.ndarray:
    """Digits 0-9 (0 = blank) -> HRM tokens 1-10."""
    arr = np.asarray(grid, dtype=np.uint8).reshape(SEQ_LEN)
    if arr.max(initial=0) > 9:
        raise ValueError("sudoku digits must be 0-9")
    return arr + 1


def decode(tokens: np.ndarray) -> np.ndarray:
    """HRM tokens -> digits (0 = blank or pad), shape (9, 9)."""
    return np.clip(np.asarray(tokens, dtype=np.int64).reshape(9, 9) - 1, 0, 9)


# ----------------------------------------------------------------------------- augmentations

@dataclass(frozen=True)
class SudokuTransform:
    """A validity-preserving relabelling: ``out.flat[i] = digits[grid.flat[cells[i]]]``.

    Every HRM augmentation (digit permutation, band/stack shuffles, row/column shuffles within a
    band/stack, transpose) is a cell permutation plus a digit map, so one form covers them all
    and composes/inverts exactly (needed to map model predictions back to the original puzzle).
    """

    cells: tuple[int, ...]
    digits: tuple[int, ...]  # digits[0] == 0: blanks stay blank

    def apply(self, grid: np.ndarray | list[int]) -> np.ndarray:
        arr = np.asarray(grid).reshape(SEQ_LEN)
        out = np.asarray(self.digits)[arr[np.asarray(self.cells)]]
        return out.astype(np.asarray(grid).dtype).reshape(np.shape(grid))

    def inverse(self) -> SudokuTransform:
        return SudokuTransform(tuple(np.argsort(self.cells).tolist()), tuple(np.argsort(self.digits).tolist()))

    def then(self, other: SudokuTransform) -> SudokuTransform:
        """``other`` applied after ``self``."""
        return SudokuTransform(tuple(np.asarray(self.cells)[np.asarray(other.cells)].tolist()),
                               tuple(np.asarray(other.digits)[np.asarray(self.digits)].tolist()))


IDENTITY = SudokuTransform(tuple(range(81)), tuple(range(10)))


def _positional(row_perm: np.ndarray | None = None, col_perm: np.ndarray | None = None,
                transpose: bool = False) -> SudokuTransform:
    """out[i, j] = g[r_i, c_j] where g is the grid, transposed first when ``transpose``."""
    r = np.arange(9) if row_perm is None else np.asarray(row_perm)
    c = np.arange(9) if col_perm is None else np.asarray(col_perm)
    src = c[None, :] * 9 + r[:, None] if transpose else r[:, None] * 9 + c[None, :]
    return SudokuTransform(tuple(src.reshape(-1).tolist()), tuple(range(10)))


def _apply(grid: np.ndarray, t: SudokuTransform) -> tuple[np.ndarray, SudokuTransform]:
    return t.apply(grid), t


def _block_perm(rng: np.random.Generator) -> np.ndarray:
    return np.concatenate([b * 3 + np.arange(3) for b in rng.permutation(3)])


def _within_perm(rng: np.random.Generator) -> np.ndarray:
    return np.concatenate([b * 3 + rng.permutation(3) for b in range(3)])


def permute_digits(grid: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, SudokuTransform]:
    """Relabel digits 1-9; returns the new grid and the transform (``.inverse()`` undoes it)."""
    digits = tuple([0] + (rng.permutation(9) + 1).tolist())
    return _apply(grid, SudokuTransform(IDENTITY.cells, digits))


def shuffle_bands(grid: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, SudokuTransform]:
    return _apply(grid, _positional(row_perm=_block_perm(rng)))


def shuffle_stacks(grid: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, SudokuTransform]:
    return _apply(grid, _positional(col_perm=_block_perm(rng)))


def shuffle_rows_in_bands(grid: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, SudokuTransform]:
    return _apply(grid, _positional(row_perm=_within_perm(rng)))


def shuffle_cols_in_stacks(grid: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, SudokuTransform]:
    return _apply(grid, _positional(col_perm=_within_perm(rng)))


def transpose(grid: np.ndarray, rng: np.random.Generator | None = None) -> tuple[np.ndarray, SudokuTransform]:
    return _apply(grid, _positional(transpose=True))


AUGMENTATIONS = (permute_digits, shuffle_bands, shuffle_stacks, shuffle_rows_in_bands, shuffle_cols_in_stacks)


def random_transform(rng: np.random.Generator) -> SudokuTransform:
    """HRM's augmentation: all shuffles and a digit permutation, transposed with probability 1/2.

    Drawn by ``sudoku_augment`` (the batched path the dataset builder uses), so one grid and a
    million grids follow the same distribution.
    """
    cells, digits = sudoku_augment.tables(sudoku_augment.draw(rng, 1))
    return SudokuTransform(tuple(cells[0].tolist()), tuple(digits[0].tolist()))


# ----------------------------------------------------------------------------- importers

Row = tuple[list[int], list[int], float]  # puzzle digits, solution digits, difficulty


def _solve_unique(puzzle: list[int], where: str) -> tuple[list[int], int]:
    res = solve(puzzle)
    if not res.unique:
        what = "no solution" if res.num_solutions == 0 else "several solutions"
        raise DistlabError(f"{where}: puzzle has {what}; HRM labels need exactly one (fix or drop the line)")
    return res.solution, res.guesses


def read_csv(path: str | os.PathLike, min_difficulty: float | None = None) -> list[Row]:
    """Sudoku-Extreme CSV (``source,q,a,rating``, '.' = blank); difficulty = ``rating``."""
    rows: list[Row] = []
    for line, rec in enumerate(read_headed_csv(path, ["source", "q", "a", "rating"], "Sudoku-Extreme"), start=2):
        if len(rec) < 4:
            raise DistlabError(f"{path}:{line}: {len(rec)} columns, expected 4 (source,q,a,rating); fix or drop "
                               f"the line")
        _, q, a, rating = rec[:4]
        try:
            value = float(rating)
        except ValueError:
            raise DistlabError(f"{path}:{line}: rating {rating!r} is not a number") from None
        if min_difficulty is None or value >= min_difficulty:
            try:
                rows.append((parse_grid(q), parse_grid(a), value))
            except (DistlabError, ValueError) as exc:
                raise DistlabError(f"{path}:{line}: {exc}") from None
    return rows


def read_txt(path: str | os.PathLike) -> list[Row]:
    """One 81-character puzzle per line; labels come from the solver, difficulty = effort."""
    rows: list[Row] = []
    for n, line in enumerate(Path(path).read_text().splitlines(), start=1):
        line = line.split("//")[0].strip()
        if line:
            puzzle = parse_grid(line)
            solution, guesses = _solve_unique(puzzle, f"{path}:{n}")
            rows.append((puzzle, solution, float(guesses)))
    return rows


# ----------------------------------------------------------------------------- building

def _metadata() -> PuzzleMetadata:
    return PuzzleMetadata(pad_id=0, ignore_label_id=0, blank_identifier_id=0, vocab_size=VOCAB_SIZE,
                          seq_len=SEQ_LEN, num_puzzle_identifiers=1, total_groups=0, mean_puzzle_examples=1.0)


def write_sudoku_split(output_dir: str | os.PathLike, split: str, rows: list[Row], num_aug: int,
                       rng: np.random.Generator) -> SplitBuilder:
    """Each original puzzle is a group; its ``num_aug`` augmentations are extra one-example puzzles.

    The augmentations of a puzzle are made in one batched call (``sudoku_augment``), which is what
    makes HRM's 1,000 x 1,000 dataset a matter of seconds.
    """
    builder = SplitBuilder(SEQ_LEN)
    for puzzle, solution, diff in rows:
        p, s = np.asarray(puzzle, np.uint8), np.asarray(solution, np.uint8)
        builder.add_puzzle([(encode(p), encode(s))], 0, diff)
        if num_aug > 0:
            aug_p, aug_s = sudoku_augment.augment(p, s, rng, num_aug)
            builder.add_single_example_puzzles(aug_p + 1, aug_s + 1, 0, diff)  # +1: digits -> HRM tokens
        builder.end_group()
    builder.write(output_dir, split, _metadata())
    return builder


def _load_source(source: str, min_difficulty: float | None) -> tuple[list[Row] | None, list[Row] | None, list[Row] | None]:
    """(train, test, pool): a folder with train.csv/test.csv gives both; one file gives a pool to split."""
    path = Path(source)
    if not path.exists():
        raise DistlabError(f"sudoku source {source} not found; use 'generate', a .csv/.txt file or a folder "
                           "holding train.csv and test.csv")
    if path.is_dir():
        files = [path / "train.csv", path / "test.csv"]
        if not all(f.exists() for f in files):
            raise DistlabError(f"{path} must contain train.csv and test.csv (Sudoku-Extreme layout)")
        return read_csv(files[0], min_difficulty), read_csv(files[1], min_difficulty), None
    if path.suffix == ".csv":
        return None, None, read_csv(path, min_difficulty)
    rows = read_txt(path)
    return None, None, [r for r in rows if min_difficulty is None or r[2] >= min_difficulty]


def _stats(name: str, rows: list[Row]) -> str:
    d = np.array([r[2] for r in rows], dtype=np.float64)
    if len(d) == 0:
        return f"{name}: 0 puzzles"
    q = np.percentile(d, [0, 25, 50, 75, 90, 100])
    clues = np.mean([sum(1 for v in r[0] if v) for r in rows])
    return (f"{name}: {len(rows)} puzzles, mean clues {clues:.1f}, difficulty min/25/50/75/90/max = "
            + "/".join(f"{v:g}" for v in q))


def build_sudoku(output_dir: str | os.PathLike, *, source: str = "generate", train_size: int | None = 1000,
                 test_size: int | None = 10000, min_difficulty: float | None = None,
                 subsample_size: int | None = None, num_aug: int = 0, seed: int = 0, workers: int = 1,
                 blanks: int | None = None, verbose: bool = True) -> dict[str, int]:
    """Build ``output_dir/{train,test}`` + ``identifiers.json``; returns example counts per split.

    ``source``: ``"generate"`` (unique puzzles from ``seed``; ``min_difficulty`` defaults to
    ``HARD_EFFORT``), a Sudoku-Extreme CSV, a folder with its ``train.csv``/``test.csv``, or a
    text file of 81-character puzzles. A single file is shuffled with ``seed`` and split into
    ``test_size`` test puzzles and up to ``train_size`` training ones. ``subsample_size`` draws a
    random training subset as HRM does; augmentations apply to training only.

    ``blanks`` (generate only): puzzles with exactly that many blanks instead of minimal ones, easy
    enough for a tiny model to learn on a CPU in minutes; ``min_difficulty`` then defaults to 0.
    Difficulty is still the measured effort.
    """
    t0 = time.time()
    rng = np.random.default_rng(seed)
    if blanks is not None and source != "generate":
        raise DistlabError(f"--blanks only applies to --source generate (got {source!r}); drop --blanks")
    if source == "generate":
        check_blanks(blanks)
        default_md = HARD_EFFORT if blanks is None else 0
        md = default_md if min_difficulty is None else int(min_difficulty)
        test = generate_puzzles(test_size or 0, seed, stream=1, min_difficulty=md, workers=workers, blanks=blanks)
        test_keys = {"".join(map(str, p)) for p, _, _ in test}
        train = generate_puzzles(train_size or 0, seed, stream=0, min_difficulty=md, workers=workers,
                                 exclude=test_keys, blanks=blanks)
        train = [(p, s, float(e)) for p, s, e in train]
        test = [(p, s, float(e)) for p, s, e in test]
    else:
        train, test, pool = _load_source(source, min_difficulty)
        if pool is not None:
            order = rng.permutation(len(pool))
            n_test = len(pool) // 10 if test_size is None else test_size
            if n_test >= len(pool):
                raise DistlabError(f"{source} has {len(pool)} usable puzzles, not enough for --test-size {n_test} "
                                   "plus training; lower --test-size")
            test = [pool[i] for i in order[:n_test]]
            train = [pool[i] for i in order[n_test:]]
        elif test_size is not None:
            test = test[:test_size]
        if train_size is not None:
            train = train[:train_size]
    if subsample_size is not None and subsample_size < len(train):
        train = [train[i] for i in sorted(rng.choice(len(train), subsample_size, replace=False))]
    if not train or not test:
        raise DistlabError(f"sudoku source {source} gave {len(train)} train / {len(test)} test puzzles; "
                           "both must be non-empty (check --min-difficulty and sizes)")
    tr = write_sudoku_split(output_dir, "train", train, num_aug, rng)
    te = write_sudoku_split(output_dir, "test", test, 0, rng)
    write_identifiers(output_dir, ["<blank>"])
    if verbose:
        print(_stats("train", train))
        print(_stats("test", test))
        print(f"wrote {tr.num_examples} train / {te.num_examples} test examples to {output_dir} "
              f"in {time.time() - t0:.1f}s")
    return {"train": tr.num_examples, "test": te.num_examples}
