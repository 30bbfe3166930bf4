"""Maze generation: shortest-path labels, symmetry inverses, CSV import."""

import csv
from collections import deque

import numpy as np
import pytest

from distlab.recipes.hrm.data import maze as mz
from distlab.recipes.hrm.data.format import load_split
from distlab.recipes.hrm.data.grids import DIHEDRAL_INVERSE, dihedral, inverse_dihedral


def _bfs_len(q):
    """Independent shortest-path length check (plain BFS over characters)."""
    s = tuple(np.argwhere(q == ord("S"))[0])
    seen = {s: 0}
    dq = deque([s])
    while dq:
        r, c = dq.popleft()
        for rr, cc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= rr < q.shape[0] and 0 <= cc < q.shape[1] and q[rr, cc] != ord("#") and (rr, cc) not in seen:
                seen[(rr, cc)] = seen[(r, c)] + 1
                dq.append((rr, cc))
    return seen[tuple(np.argwhere(q == ord("G"))[0])]


@pytest.fixture(scope="module")
def mazes():
    return [mz.generate_maze(np.random.SeedSequence([3, k])) for k in range(4)]


def test_generated_labels_are_shortest_connected_paths(mazes):
    for q, a, length in mazes:
        assert q.shape == (30, 30) and length >= mz.DEFAULT_MIN_PATH
        assert length == _bfs_len(q) == np.sum(a == ord("o")) + 1
        assert np.array_equal(np.where(a == ord("o"), ord(" "), a), q)  # label only adds 'o' on open cells
        # the 'o' cells form a walk from S to G: each path cell has exactly two path/S/G neighbours
        on = np.isin(a, [ord("o"), ord("S"), ord("G")])
        for r, c in np.argwhere(a == ord("o")):
            nb = sum(on[rr, cc] for rr, cc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1))
                     if 0 <= rr < 30 and 0 <= cc < 30)
            assert nb == 2


def test_generation_is_deterministic(mazes):
    q, a, n = mz.generate_maze(np.random.SeedSequence([3, 0]))
    assert np.array_equal(q, mazes[0][0]) and n == mazes[0][2]
    assert not np.array_equal(q, mazes[1][0])


def test_dihedral_transforms_are_distinct_and_invert(mazes):
    q, a, _ = mazes[0]
    outs = [dihedral(a, t) for t in range(8)]
    assert len({o.tobytes() for o in outs}) == 8
    for t in range(8):
        assert np.array_equal(inverse_dihedral(outs[t], t), a)
        assert np.array_equal(dihedral(dihedral(a, t), DIHEDRAL_INVERSE[t]), a)
        ans, length, ways = mz.solve_maze(dihedral(q, t))  # symmetry preserves the shortest path
        assert length == mazes[0][2] and ways == 1 and np.array_equal(ans, outs[t])


def test_csv_import_and_augmented_build(tmp_path, mazes):
    path = tmp_path / "m.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["source", "question", "answer", "rating"])
        for q, a, n in mazes:
            w.writerow(["gen", mz.to_text(q), mz.to_text(a), n])
    counts = mz.build_maze(tmp_path / "d", source=str(path), test_size=1, aug=True, seed=0, verbose=False)
    assert counts == {"train": 3 * 8, "test": 1}
    tr = load_split(tmp_path / "d", "train")
    assert tr.metadata.vocab_size == 6 and tr.metadata.seq_len == 900
    x, y, _ = tr.example(0)
    assert set(np.unique(x)) <= {1, 2, 3, 4} and 5 in set(np.unique(y))
    q = mz.decode(x)
    assert _bfs_len(q) == tr.difficulty[0] == np.sum(mz.decode(y) == ord("o")) + 1
