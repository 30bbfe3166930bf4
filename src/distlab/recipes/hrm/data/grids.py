"""The 8 symmetries of a square grid, numbered as HRM numbers them (``dataset/common.py``).

Keeping HRM's ids matters: predictions on augmented puzzles are mapped back with the inverse
id, and datasets built by HRM's scripts record augmentations with these numbers.
"""

from __future__ import annotations

import numpy as np

DIHEDRAL_NAMES = ("identity", "rot90", "rot180", "rot270", "flip_lr", "flip_ud", "transpose", "anti_transpose")
#: DIHEDRAL_INVERSE[t] undoes transform t (rotations by 90/270 swap, the rest are involutions).
DIHEDRAL_INVERSE = (0, 3, 2, 1, 4, 5, 6, 7)


def dihedral(grid: np.ndarray, tid: int) -> np.ndarray:
    """Apply symmetry ``tid`` (0-7) to a 2-D grid; returns a contiguous copy."""
    g = np.asarray(grid)
    if tid == 0:
        out = g
    elif tid in (1, 2, 3):
        out = np.rot90(g, k=tid)
    elif tid == 4:
        out = g[:, ::-1]
    elif tid == 5:
        out = g[::-1, :]
    elif tid == 6:
        out = g.T
    elif tid == 7:
        out = np.rot90(g, k=1)[:, ::-1]
    else:
        raise ValueError(f"dihedral transform id must be 0-7, got {tid}")
    return np.ascontiguousarray(out)


def inverse_dihedral(grid: np.ndarray, tid: int) -> np.ndarray:
    return dihedral(grid, DIHEDRAL_INVERSE[tid])
