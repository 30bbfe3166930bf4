"""Deterministic, parallel generation of uniquely solvable Sudoku puzzles.

Attempt ``k`` of stream ``s`` is generated from its own RNG seeded by ``(seed, s, k)``; attempts are
cut into fixed-size chunks that workers process in any order, and results are consumed in chunk
order. The output therefore depends only on ``seed`` (never on the worker count).

``blanks=N`` makes easy puzzles for quick demos: cells are blanked in random order while the
solution stays unique, stopping at exactly N blanks; an attempt that cannot reach N (its minimal
puzzle has fewer blanks) is skipped like any other rejected attempt.
"""

from __future__ import annotations

import multiprocessing as mp
import random
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor

import numpy as np

from distlab.errors import DistlabError

from .sudoku_solver import effort, minimal_puzzle, random_solution

CHUNK = 16
#: "Hard" = at least this many guesses (see ``sudoku_solver.effort``). Every top95 puzzle reaches
#: it; about a quarter of random minimal puzzles do, so generation stays fast.
HARD_EFFORT = 5
#: The largest ``--min-difficulty`` generation accepts. Generated minimal puzzles rarely exceed effort 40, so a
#: higher floor would run for hours before the acceptance-rate projection could even speak; refused at once.
MAX_MIN_DIFFICULTY = 200
#: No uniquely solvable sudoku has fewer than 17 clues, so at most 81 - 17 cells can be blank.
MAX_BLANKS = 81 - 17

Generated = tuple[list[int], list[int], int]  # puzzle, solution, effort


def attempt_rng(seed: int, stream: int, attempt: int) -> random.Random:
    state = np.random.SeedSequence([seed, stream, attempt]).generate_state(2, np.uint64)
    return random.Random(int(state[0]) << 64 | int(state[1]))


def check_blanks(blanks: int | None) -> None:
    if blanks is not None and not 1 <= blanks <= MAX_BLANKS:
        raise DistlabError(f"--blanks must be between 1 and {MAX_BLANKS} (a unique sudoku keeps >= 17 clues), "
                           f"got {blanks}")


def generate_one(seed: int, stream: int, attempt: int, min_clues: int = 17, blanks: int | None = None) -> Generated:
    """One uniquely solvable puzzle (minimal when ``min_clues`` = 17) with its effort.

    ``blanks`` overrides ``min_clues`` with ``81 - blanks``; the result may have fewer blanks when
    uniqueness stops the removal first (callers wanting exactly ``blanks`` must check).
    """
    if blanks is not None:
        min_clues = 81 - blanks
    rng = attempt_rng(seed, stream, attempt)
    solution = random_solution(rng)
    puzzle = minimal_puzzle(solution, rng, min_clues)
    return puzzle, solution, effort(puzzle)


def _chunk(seed: int, stream: int, chunk: int, min_difficulty: int, max_difficulty: int | None,
           min_clues: int, blanks: int | None = None) -> list[Generated]:
    out = []
    for k in range(chunk * CHUNK, (chunk + 1) * CHUNK):
        p, s, e = generate_one(seed, stream, k, min_clues, blanks)
        if blanks is not None and p.count(0) != blanks:
            continue
        if e >= min_difficulty and (max_difficulty is None or e <= max_difficulty):
            out.append((p, s, e))
    return out


def _chunks_in_order(seed: int, stream: int, workers: int, args: tuple) -> Iterator[list[Generated]]:
    if workers <= 1:
        c = 0
        while True:
            yield _chunk(seed, stream, c, *args)
            c += 1
    ctx = mp.get_context("spawn")  # safe even when the caller already imported torch (threads)
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        pending: deque[Future] = deque()
        c = 0
        try:
            while True:
                while len(pending) < 2 * workers:
                    pending.append(pool.submit(_chunk, seed, stream, c, *args))
                    c += 1
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()


PROJECT_AFTER = 1_024  # attempts before the acceptance rate is trusted to project the total (~10 s on 2 cores)


def generate_puzzles(n: int, seed: int, stream: int = 0, min_difficulty: int = 0,
                     max_difficulty: int | None = None, workers: int = 1, min_clues: int = 17,
                     exclude: set[str] | None = None, max_attempts: int | None = None,
                     blanks: int | None = None) -> list[Generated]:
    """First ``n`` accepted puzzles of the stream (duplicates and ``exclude``d grids are skipped).

    ``blanks``: exactly that many blank cells per puzzle instead of a minimal puzzle (easy demos).
    """
    check_blanks(blanks)
    if min_difficulty > MAX_MIN_DIFFICULTY:
        raise DistlabError(f"--min-difficulty {min_difficulty} cannot be generated (generated puzzles rarely exceed "
                           f"effort 40; hard = {HARD_EFFORT}); use {MAX_MIN_DIFFICULTY} or less")
    seen = set(exclude or ())
    out: list[Generated] = []
    if n <= 0:
        return out
    max_attempts = max_attempts or 500 * n + 20_000
    chunks = _chunks_in_order(seed, stream, workers, (min_difficulty, max_difficulty, min_clues, blanks))
    try:
        for i, chunk in enumerate(chunks):
            tried = i * CHUNK
            if tried >= PROJECT_AFTER and n * tried > max_attempts * max(len(out), 1 / 2):
                # at the rate seen so far the cap would be reached long before n puzzles: say so now, not in hours
                raise DistlabError(
                    f"{len(out)} of {tried} generated sudokus had effort in [{min_difficulty}, {max_difficulty}]; at "
                    f"that rate {n} need more than the {max_attempts} attempts allowed; lower --min-difficulty "
                    f"(hard = {HARD_EFFORT}; generated puzzles rarely exceed effort 40)"
                    + (" or --blanks" if blanks is not None else ""))
            if tried >= max_attempts:
                if blanks is not None:
                    raise DistlabError(
                        f"only {len(out)} of {n} generated sudokus had exactly {blanks} blanks and effort in "
                        f"[{min_difficulty}, {max_difficulty}] after {i * CHUNK} attempts; lower --blanks "
                        "(up to ~50 always works) or --min-difficulty")
                raise DistlabError(
                    f"only {len(out)} of {n} generated sudokus had effort in [{min_difficulty}, {max_difficulty}] "
                    f"after {i * CHUNK} attempts; lower --min-difficulty (hard = {HARD_EFFORT})")
            for p, s, e in chunk:
                key = "".join(map(str, p))
                if key not in seen:
                    seen.add(key)
                    out.append((p, s, e))
                    if len(out) == n:
                        return out
    finally:
        chunks.close()  # shuts the worker pool down now, not at garbage collection
    return out
