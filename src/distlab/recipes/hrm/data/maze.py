"""30x30 maze datasets in HRM's format (Maze-Hard: ``source,question,answer,rating`` CSV).

Characters ``'#'`` wall, ``' '`` open, ``'S'`` start, ``'G'`` goal, ``'o'`` path become tokens
1-5 (HRM's ``CHARSET = "# SGo"``), pad 0, ``seq_len`` 900, ``vocab_size`` 6. The label is the
question with the cells strictly between S and G on the shortest path marked ``'o'``.

Path length (our difficulty) = number of moves from S to G = ``'o'`` cells + 1. Maze-Hard keeps
mazes whose path is longer than 110; we generate a depth-first (long-corridor) maze on the
odd-coordinate cells, open a few extra walls so paths are not forced by the tree shape alone,
place S at a random cell and G among cells at least ``min_path_length`` moves away, and keep
only mazes whose shortest path is unique (otherwise the label would be ambiguous).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import numpy as np

from distlab.errors import DistlabError

from .format import PuzzleMetadata, SplitBuilder, read_headed_csv, write_identifiers
from .grids import DIHEDRAL_INVERSE, dihedral, inverse_dihedral

SIZE = 30
CHARSET = "# SGo"
WALL, OPEN, START, GOAL, PATH = (ord(c) for c in CHARSET)
DEFAULT_MIN_PATH = 111  # Maze-Hard: path length > 110
__all__ = ["DIHEDRAL_INVERSE", "build_maze", "dihedral", "encode", "decode", "generate_maze",
           "inverse_dihedral", "shortest_path", "solve_maze"]

_CHAR2TOKEN = np.zeros(256, np.uint8)
_CHAR2TOKEN[[ord(c) for c in CHARSET]] = np.arange(1, len(CHARSET) + 1)
_TOKEN2CHAR = np.array([ord(" ")] + [ord(c) for c in CHARSET], np.uint8)


def to_grid(text: str) -> np.ndarray:
    """Row-major text -> (n, n) array of character codes."""
    n = int(round(len(text) ** 0.5))
    if n * n != len(text) or set(text) - set(CHARSET):
        raise DistlabError(f"a maze must be a square string of the characters {CHARSET!r}, got {text[:40]!r}...")
    return np.frombuffer(text.encode(), np.uint8).reshape(n, n).copy()


def to_text(grid: np.ndarray) -> str:
    return np.asarray(grid, np.uint8).tobytes().decode()


def encode(grid: np.ndarray) -> np.ndarray:
    return _CHAR2TOKEN[np.asarray(grid, np.uint8).reshape(-1)]


def decode(tokens: np.ndarray, size: int = SIZE) -> np.ndarray:
    return _TOKEN2CHAR[np.asarray(tokens, np.int64).reshape(size, size)]


# ----------------------------------------------------------------------------- solving

def _adjacency(grid: np.ndarray) -> list[list[int]]:
    """Open neighbours of every flat cell index (plain lists: BFS in Python is faster than numpy here)."""
    n, m = grid.shape
    free = (grid != WALL).reshape(-1).tolist()
    adj: list[list[int]] = [[] for _ in range(n * m)]
    for i in range(n * m):
        if free[i]:
            r, c = divmod(i, m)
            adj[i] = [j for j, ok in ((i - m, r > 0), (i + m, r < n - 1), (i - 1, c > 0), (i + 1, c < m - 1))
                      if ok and free[j]]
    return adj


def _bfs_flat(adj: list[list[int]], start: int) -> tuple[list[int], list[int]]:
    """(moves from start per cell, -1 = unreachable; cells in visiting order)."""
    dist = [-1] * len(adj)
    dist[start] = 0
    order = [start]
    for i in order:  # ``order`` grows while we walk it: a FIFO queue without pops
        d = dist[i] + 1
        for j in adj[i]:
            if dist[j] < 0:
                dist[j] = d
                order.append(j)
    return dist, order


def _bfs(grid: np.ndarray, start: tuple[int, int]) -> np.ndarray:
    """Moves from ``start`` to every cell (-1 = unreachable or wall)."""
    dist, _ = _bfs_flat(_adjacency(grid), start[0] * grid.shape[1] + start[1])
    return np.array(dist, np.int32).reshape(grid.shape)


def shortest_path(grid: np.ndarray, start: tuple[int, int], goal: tuple[int, int]
                  ) -> tuple[list[tuple[int, int]] | None, int]:
    """(one shortest path start..goal, number of shortest paths capped at 2)."""
    m = grid.shape[1]
    adj = _adjacency(grid)
    s, g = start[0] * m + start[1], goal[0] * m + goal[1]
    dist, order = _bfs_flat(adj, s)
    if dist[g] < 0:
        return None, 0
    ways = [0] * len(adj)  # shortest-path counts along BFS layers, capped at 2
    ways[s] = 1
    for i in order[1:]:
        ways[i] = min(2, sum(ways[j] for j in adj[i] if dist[j] == dist[i] - 1))
    path = [g]
    while path[-1] != s:
        i = path[-1]
        path.append(next(j for j in adj[i] if dist[j] == dist[i] - 1))
    return [divmod(i, m) for i in reversed(path)], ways[g]


def _find(grid: np.ndarray, code: int) -> tuple[int, int]:
    where = np.argwhere(grid == code)
    if len(where) != 1:
        raise DistlabError(f"a maze needs exactly one {chr(code)!r}, found {len(where)}")
    return int(where[0, 0]), int(where[0, 1])


def solve_maze(question: np.ndarray) -> tuple[np.ndarray, int, int]:
    """(answer grid with 'o' on the path, path length in moves, number of shortest paths capped at 2)."""
    start, goal = _find(question, START), _find(question, GOAL)
    path, ways = shortest_path(question, start, goal)
    if path is None:
        raise DistlabError("maze has no path from S to G")
    answer = question.copy()
    for p in path[1:-1]:
        answer[p] = PATH
    return answer, len(path) - 1, ways


# ----------------------------------------------------------------------------- generation

def _carve_dfs(rng: random.Random, size: int) -> np.ndarray:
    """Perfect maze: depth-first backtracker on odd coordinates (long winding corridors)."""
    k = len(range(1, size, 2))
    grid = np.full((size, size), WALL, np.uint8)
    seen = [[False] * k for _ in range(k)]
    i, j = rng.randrange(k), rng.randrange(k)
    seen[i][j] = True
    opened = [(2 * i + 1, 2 * j + 1)]
    stack = [(i, j)]
    while stack:
        i, j = stack[-1]
        options = [(a, b) for a, b in ((i - 1, j), (i + 1, j), (i, j - 1), (i, j + 1))
                   if 0 <= a < k and 0 <= b < k and not seen[a][b]]
        if not options:
            stack.pop()
            continue
        a, b = options[rng.randrange(len(options))]
        seen[a][b] = True
        opened += [(2 * a + 1, 2 * b + 1), (i + a + 1, j + b + 1)]  # the cell and the wall before it
        stack.append((a, b))
    rows, cols = zip(*opened)
    grid[list(rows), list(cols)] = OPEN
    return grid


def _open_extra_walls(grid: np.ndarray, rng: np.random.Generator, fraction: float) -> None:
    """Knock down a fraction of the walls separating two cells, creating loops."""
    n = grid.shape[0]
    between = [(r, c) for r in range(1, n) for c in range(1, n)
               if (r % 2 == 1 and c % 2 == 0 and c + 1 < n) or (r % 2 == 0 and c % 2 == 1 and r + 1 < n)]
    walls = [w for w in between if grid[w] == WALL]
    if walls and fraction > 0:
        pick = rng.choice(len(walls), int(round(fraction * len(walls))), replace=False)
        for idx in pick:
            grid[walls[idx]] = OPEN


def generate_maze(seed: int | np.random.SeedSequence, min_path_length: int = DEFAULT_MIN_PATH,
                  loop_fraction: float = 0.05, size: int = SIZE, max_tries: int = 100
                  ) -> tuple[np.ndarray, np.ndarray, int]:
    """(question, answer, path length) with a unique shortest path of at least ``min_path_length``."""
    rng = np.random.default_rng(seed)
    prng = random.Random(int(rng.integers(2**63)))
    for _ in range(max_tries):
        grid = _carve_dfs(prng, size)
        _open_extra_walls(grid, rng, loop_fraction)
        free = np.argwhere(grid == OPEN)
        s = tuple(free[rng.integers(len(free))])
        dist = _bfs(grid, s)
        if dist.max() < min_path_length:  # start from the far end instead (close to the diameter)
            s = tuple(np.argwhere(dist == dist.max())[0])
            dist = _bfs(grid, s)
        far = np.argwhere(dist >= min_path_length)
        if len(far) == 0:
            continue
        g = tuple(far[rng.integers(len(far))])
        question = grid.copy()
        question[s], question[g] = START, GOAL
        answer, length, ways = solve_maze(question)
        if ways == 1:
            return question, answer, length
    raise DistlabError(f"could not generate a {size}x{size} maze with a unique path >= {min_path_length} moves "
                       f"in {max_tries} tries; lower --min-path-length or --loop-fraction")


# ----------------------------------------------------------------------------- import / build

Row = tuple[np.ndarray, np.ndarray, float]


def read_csv(path: str | os.PathLike) -> list[Row]:
    """Maze-Hard CSV; difficulty = path length of the given answer."""
    rows: list[Row] = []
    for rec in read_headed_csv(path, ["source", "question", "answer", "rating"], "Maze-Hard"):
        q, a = to_grid(rec[1]), to_grid(rec[2])
        rows.append((q, a, float(np.sum(a == PATH) + 1)))
    return rows


def _metadata(size: int) -> PuzzleMetadata:
    return PuzzleMetadata(pad_id=0, ignore_label_id=0, blank_identifier_id=0, vocab_size=len(CHARSET) + 1,
                          seq_len=size * size, num_puzzle_identifiers=1, total_groups=0, mean_puzzle_examples=1.0)


def write_maze_split(output_dir: str | os.PathLike, split: str, rows: list[Row], aug: bool) -> SplitBuilder:
    """One group per maze; with ``aug`` the group holds all 8 symmetries (HRM's ``--aug``)."""
    size = rows[0][0].shape[0]
    builder = SplitBuilder(size * size)
    for q, a, diff in rows:
        for tid in range(8 if aug else 1):
            builder.add_puzzle([(encode(dihedral(q, tid)), encode(dihedral(a, tid)))], 0, diff)
        builder.end_group()
    builder.write(output_dir, split, _metadata(size))
    return builder


def _generate(n: int, seed: int, stream: int, min_path_length: int, loop_fraction: float) -> list[Row]:
    rows = []
    for k in range(n):
        q, a, length = generate_maze(np.random.SeedSequence([seed, stream, k]), min_path_length, loop_fraction)
        rows.append((q, a, float(length)))
    return rows


def build_maze(output_dir: str | os.PathLike, *, source: str = "generate", train_size: int | None = 1000,
               test_size: int | None = 1000, min_path_length: int = DEFAULT_MIN_PATH, loop_fraction: float = 0.05,
               subsample_size: int | None = None, aug: bool = False, seed: int = 0,
               verbose: bool = True) -> dict[str, int]:
    """Build a maze dataset from generated mazes or a Maze-Hard folder (``train.csv``/``test.csv``) or CSV.

    Imported mazes are filtered to path length >= ``min_path_length`` only when generating; a
    single CSV is shuffled with ``seed`` and split into ``test_size`` test mazes and the rest.
    """
    t0 = time.time()
    rng = np.random.default_rng(seed)
    if source == "generate":
        test = _generate(test_size or 0, seed, 1, min_path_length, loop_fraction)
        train = _generate(train_size or 0, seed, 0, min_path_length, loop_fraction)
    else:
        path = Path(source)
        if path.is_dir() and (path / "train.csv").exists() and (path / "test.csv").exists():
            train, test = read_csv(path / "train.csv"), read_csv(path / "test.csv")
        elif path.is_file():
            pool = read_csv(path)
            order = rng.permutation(len(pool))
            n_test = len(pool) // 10 if test_size is None else min(test_size, len(pool) - 1)
            test, train = [pool[i] for i in order[:n_test]], [pool[i] for i in order[n_test:]]
        else:
            raise DistlabError(f"maze source {source} not found; use 'generate', a Maze-Hard CSV or a folder "
                               "holding train.csv and test.csv")
        test = test[:test_size] if test_size is not None else test
        train = train[:train_size] if train_size is not None else train
    if subsample_size is not None and subsample_size < len(train):
        train = [train[i] for i in sorted(rng.choice(len(train), subsample_size, replace=False))]
    if not train or not test:
        raise DistlabError(f"maze source {source} gave {len(train)} train / {len(test)} test mazes; both must be > 0")
    tr = write_maze_split(output_dir, "train", train, aug)
    te = write_maze_split(output_dir, "test", test, False)
    write_identifiers(output_dir, ["<blank>"])
    if verbose:
        for name, rows in (("train", train), ("test", test)):
            d = np.array([r[2] for r in rows])
            print(f"{name}: {len(rows)} mazes, path length min/median/max = {d.min():g}/{np.median(d):g}/{d.max():g}")
        print(f"wrote {tr.num_examples} train / {te.num_examples} test examples to {output_dir} "
              f"in {time.time() - t0:.1f}s")
    return {"train": tr.num_examples, "test": te.num_examples}
