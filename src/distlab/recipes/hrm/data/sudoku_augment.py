"""HRM's Sudoku augmentation for many examples at once, as array operations over ``(N, 81)`` grids.

Building HRM's published dataset (1,000 puzzles x 1,000 augmentations) one transform at a time in
Python took minutes; drawing every random choice as an array and applying all transforms with one
fancy-indexing gather takes seconds. The distribution is HRM's (``build_sudoku_dataset.py``): a
uniform digit relabelling of 1-9, a uniform band order and stack order, a uniform row order within
each band and column order within each stack, and a transpose with probability 1/2, all
independent. ``sudoku.SudokuTransform`` is the same transform for one grid (tests check they agree).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CELLS = 81


@dataclass(frozen=True)
class SudokuDraws:
    """The random choices of ``n`` transforms; each field holds one row per transform."""

    transpose: np.ndarray  # (n,) bool: transpose the grid first
    digits: np.ndarray  # (n, 9) permutation of 0-8: digit d (1-9) becomes digits[d - 1] + 1
    bands: np.ndarray  # (n, 3) band order: output band b is input band bands[b]
    stacks: np.ndarray  # (n, 3) stack order, as bands for columns
    rows: np.ndarray  # (n, 3, 3) row order inside each output band
    cols: np.ndarray  # (n, 3, 3) column order inside each output stack

    def __len__(self) -> int:
        return len(self.transpose)


def _permutations(rng: np.random.Generator, shape: tuple[int, ...], k: int) -> np.ndarray:
    """Uniform permutations of ``range(k)`` along the last axis (argsort of i.i.d. uniforms)."""
    return np.argsort(rng.random((*shape, k)), axis=-1).astype(np.int64)


def draw(rng: np.random.Generator, n: int) -> SudokuDraws:
    """The random choices of ``n`` independent HRM augmentations."""
    return SudokuDraws(transpose=rng.random(n) < 0.5, digits=_permutations(rng, (n,), 9),
                       bands=_permutations(rng, (n,), 3), stacks=_permutations(rng, (n,), 3),
                       rows=_permutations(rng, (n, 3), 3), cols=_permutations(rng, (n, 3), 3))


def _line_map(blocks: np.ndarray, within: np.ndarray) -> np.ndarray:
    """(n, 9) source line of each output line: block order, then order inside each block."""
    src_block = blocks[:, :, None]  # output block b comes from input block blocks[b]
    return (src_block * 3 + within).reshape(len(blocks), 9)


def tables(d: SudokuDraws) -> tuple[np.ndarray, np.ndarray]:
    """``(cells, digit_map)``: ``out[n, i] = digit_map[n, grid[n, cells[n, i]]]``.

    ``cells`` is ``(n, 81)``; ``digit_map`` is ``(n, 10)`` with ``digit_map[:, 0] == 0`` so blanks
    stay blank.
    """
    row, col = _line_map(d.bands, d.rows), _line_map(d.stacks, d.cols)
    straight = row[:, :, None] * 9 + col[:, None, :]
    transposed = col[:, None, :] * 9 + row[:, :, None]
    cells = np.where(d.transpose[:, None, None], transposed, straight).reshape(len(d), CELLS)
    digit_map = np.concatenate([np.zeros((len(d), 1), np.int64), d.digits + 1], axis=1)
    return cells, digit_map


def apply(grids: np.ndarray, cells: np.ndarray, digit_map: np.ndarray) -> np.ndarray:
    """Transform digit grids (``(81,)`` for one grid under every transform, or ``(n, 81)``)."""
    grids = np.asarray(grids)
    moved = grids[cells] if grids.ndim == 1 else np.take_along_axis(grids.reshape(len(cells), CELLS), cells, axis=1)
    return np.take_along_axis(digit_map, moved.astype(np.int64), axis=1).astype(grids.dtype)


def inverse(cells: np.ndarray, digit_map: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tables of the inverse transforms (maps predictions on augmented grids back to the original)."""
    return np.argsort(cells, axis=1), np.argsort(digit_map, axis=1)


def augment(puzzle: np.ndarray, solution: np.ndarray, rng: np.random.Generator,
            n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` augmented copies ``(puzzles, solutions)``, each ``(n, 81)``, of one puzzle and its solution."""
    cells, digit_map = tables(draw(rng, n))
    return apply(np.asarray(puzzle).reshape(CELLS), cells, digit_map), \
        apply(np.asarray(solution).reshape(CELLS), cells, digit_map)
