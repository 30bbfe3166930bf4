"""Exact 9x9 Sudoku solver: bitmask candidates, singles propagation, minimum-remaining-values search.

Pure Python on purpose: a uniqueness check on a 25-clue puzzle takes well under a millisecond,
so generating 10k hard puzzles is a matter of minutes without a compiled dependency.

Effort (our difficulty measure): the number of *guesses* -- values tried in a cell that still
had two or more candidates after propagation -- made while counting solutions up to two (i.e.
finding the solution *and* proving it unique). Propagation applies naked singles (a cell with one
candidate) and hidden singles (a digit with one place in a row/column/box) to a fixed point;
branching picks the first cell with the fewest candidates and tries digits in increasing order,
so the effort is a deterministic function of the grid. Puzzles a human solves with singles only
have effort 0; top95-style puzzles need tens to hundreds of guesses.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

ALL = 0x1FF
BIT = [1 << d for d in range(9)]
DIGIT = {1 << d: d + 1 for d in range(9)}
POP = [bin(m).count("1") for m in range(512)]

ROWS = [tuple(r * 9 + c for c in range(9)) for r in range(9)]
COLS = [tuple(r * 9 + c for r in range(9)) for c in range(9)]
BOXES = [tuple((br * 3 + i) * 9 + bc * 3 + j for i in range(3) for j in range(3))
         for br in range(3) for bc in range(3)]
UNITS = ROWS + COLS + BOXES
PEERS = [tuple(sorted({p for u in UNITS if c in u for p in u} - {c})) for c in range(81)]


@dataclass
class SolveResult:
    """Outcome of a count-to-limit search."""

    num_solutions: int  # capped at the limit asked for
    solution: list[int] | None  # first solution found (81 digits 1-9)
    guesses: int  # values tried in multi-candidate cells = effort
    backtracks: int  # guesses that led to a contradiction

    @property
    def unique(self) -> bool:
        return self.num_solutions == 1


def _propagate(cands: list[int], queue: list[int]) -> bool:
    """Naked + hidden singles to a fixed point; False on contradiction. ``queue`` = newly fixed cells."""
    while True:
        while queue:
            c = queue.pop()
            bit = cands[c]
            for p in PEERS[c]:
                m = cands[p]
                if m & bit:
                    m ^= bit
                    if not m:
                        return False
                    cands[p] = m
                    if not m & (m - 1):
                        queue.append(p)
        for unit in UNITS:
            once = twice = 0
            for c in unit:
                m = cands[c]
                twice |= once & m
                once |= m
            if once != ALL:
                return False  # some digit has no place left in this unit
            hidden = once & ~twice
            if hidden:
                for c in unit:
                    m = cands[c]
                    h = m & hidden
                    if h and m != h:
                        if h & (h - 1):
                            return False  # two digits both confined to this one cell
                        cands[c] = h
                        queue.append(c)
        if not queue:
            return True


def _initial(grid: list[int] | tuple[int, ...]) -> tuple[list[int], list[int]]:
    cands = [ALL] * 81
    queue = []
    for i, v in enumerate(grid):
        if v:
            cands[i] = BIT[v - 1]
            queue.append(i)
    return cands, queue


class _Search:
    def __init__(self, limit: int, order: list[int] | None, rng: random.Random | None) -> None:
        self.limit = limit
        self.order = order or list(range(81))
        self.rng = rng
        self.count = 0
        self.guesses = 0
        self.backtracks = 0
        self.first: list[int] | None = None

    def run(self, cands: list[int]) -> None:
        best, best_n = -1, 10
        for c in self.order:
            n = POP[cands[c]]
            if 1 < n < best_n:
                best, best_n = c, n
                if n == 2:
                    break
        if best < 0:
            self.count += 1
            if self.first is None:
                self.first = [DIGIT[m] for m in cands]
            return
        mask = cands[best]
        bits = [b for b in BIT if mask & b]
        if self.rng is not None:
            self.rng.shuffle(bits)
        for b in bits:
            self.guesses += 1
            nxt = cands[:]
            nxt[best] = b
            if _propagate(nxt, [best]):
                self.run(nxt)
                if self.count >= self.limit:
                    return
            else:
                self.backtracks += 1


def _search(cands: list[int], queue: list[int], limit: int, order: list[int] | None = None,
            rng: random.Random | None = None) -> SolveResult:
    s = _Search(limit, order, rng)
    if _propagate(cands, queue):
        s.run(cands)
    return SolveResult(s.count, s.first, s.guesses, s.backtracks)


def solve(grid: list[int] | tuple[int, ...], limit: int = 2) -> SolveResult:
    """Count solutions of ``grid`` (81 ints, 0 = blank) up to ``limit``; effort is reported too."""
    if len(grid) != 81:
        raise ValueError(f"a sudoku has 81 cells, got {len(grid)}")
    cands, queue = _initial(grid)
    return _search(cands, queue, limit)


def effort(grid: list[int] | tuple[int, ...]) -> int:
    """Guesses needed to find the solution and prove it unique (the difficulty we store)."""
    return solve(grid, limit=2).guesses


def random_solution(rng: random.Random) -> list[int]:
    """A random complete grid (randomised digit order and cell tie-breaking)."""
    order = list(range(81))
    rng.shuffle(order)
    res = _search([ALL] * 81, [], limit=1, order=order, rng=rng)
    assert res.solution is not None
    return res.solution


def unique_without(puzzle: list[int], cell: int, solution: list[int]) -> bool:
    """Is the solution still unique after blanking ``cell``? (``puzzle`` has a unique ``solution``.)

    Any other solution of the smaller puzzle must differ from ``solution`` at ``cell`` (otherwise it
    would solve the original), so we forbid the old value there and look for a single solution.
    """
    seen = 0
    for p in PEERS[cell]:
        if puzzle[p]:
            seen |= BIT[puzzle[p] - 1]
    if POP[seen] == 8:
        return True  # the other eight digits are visible: the cell is forced (cheap common case)
    cands, queue = _initial(puzzle)
    cands[cell] = ALL & ~BIT[solution[cell] - 1]
    queue = [c for c in queue if c != cell]
    return _search(cands, queue, limit=1).num_solutions == 0


def minimal_puzzle(solution: list[int], rng: random.Random, min_clues: int = 17) -> list[int]:
    """Blank cells in random order while the solution stays unique.

    With the default ``min_clues`` the result is minimal (no clue can go): a cell that could not be
    blanked earlier cannot be blanked later either, since blanking only adds solutions. A larger
    ``min_clues`` stops early and gives easy puzzles.
    """
    puzzle = list(solution)
    order = list(range(81))
    rng.shuffle(order)
    clues = 81
    for cell in order:
        if clues <= min_clues:
            break
        if unique_without(puzzle, cell, solution):
            puzzle[cell] = 0
            clues -= 1
    return puzzle


def is_valid_solution(grid: list[int] | tuple[int, ...]) -> bool:
    """Every row, column and box holds 1..9 exactly once."""
    return len(grid) == 81 and all(sorted(grid[c] for c in u) == list(range(1, 10)) for u in UNITS)
