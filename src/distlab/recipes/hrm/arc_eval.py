"""ARC scoring as HRM reports it: vote across augmentations, then pass@k per task.

The model sees every evaluation task under many augmentations (one puzzle identifier each, see
``data/arc.py``). A single prediction is noisy; mapping each back to the task's own frame and
voting turns the augmentations into an ensemble. Identical grids are one candidate, ranked by how
many augmented copies produced them, ties broken by the mean halt confidence (the model's own
estimate that it is done, so a confident minority beats an unsure one). A test input is solved at
``k`` when the true grid is among the top ``k`` candidates, and a task only when all of its test
inputs are (the ARC rule: a task with two test inputs needs both right).
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from distlab.errors import DistlabError

from .data.arc import COLOUR_OFFSET, SIZE, VOCAB_SIZE, decode_grid, inverse_aug, load_arc_meta
from .data.format import load_split

DEFAULT_KS = (1, 2, 10, 100)
TestKey = tuple[str, int]  # (task name, test index)


@dataclass
class Candidate:
    """One distinct grid predicted for a test input (in the original task's frame)."""

    grid: np.ndarray
    votes: int = 0
    confidence_sum: float = 0.0

    @property
    def confidence(self) -> float:
        return self.confidence_sum / self.votes if self.votes else float("-inf")


@dataclass
class TestVotes:
    """All votes for one test input, with its true output for scoring."""

    target: np.ndarray
    candidates: dict[bytes, Candidate] = field(default_factory=dict)
    malformed: int = 0  # predictions with no readable grid (cast no vote)

    def ranked(self) -> list[Candidate]:
        """Most votes first, then highest mean confidence; first-seen order settles exact ties."""
        return sorted(self.candidates.values(), key=lambda c: (-c.votes, -c.confidence))

    def correct_rank(self) -> int | None:
        """1-based rank of the true grid among the candidates, None when no vote produced it."""
        key = _grid_key(self.target)
        for rank, cand in enumerate(self.ranked(), start=1):
            if _grid_key(cand.grid) == key:
                return rank
        return None


def _grid_key(grid: np.ndarray) -> bytes:
    """Shape is part of the key: a 2x3 and a 3x2 grid with the same cells are different answers."""
    g = np.ascontiguousarray(grid, dtype=np.uint8)
    return bytes(g.shape) + g.tobytes()


def decode_predictions(preds: np.ndarray, chunk: int = 4096) -> list[np.ndarray | None]:
    """Batch form of ``arc.decode_prediction`` (top-left grid up to the first non-colour token in
    row 0 / column 0; None when that rectangle is not all colours). A full ARC evaluation decodes
    ~10^5-10^6 predictions, so the checks run on chunks of the batch at once."""
    t = np.asarray(preds).reshape(-1, SIZE, SIZE)
    out: list[np.ndarray | None] = []
    for start in range(0, len(t), chunk):
        out += _decode_chunk(t[start:start + chunk])
    return out


def _decode_chunk(t: np.ndarray) -> list[np.ndarray | None]:
    stop_w, stop_h = t[:, 0, :] < COLOUR_OFFSET, t[:, :, 0] < COLOUR_OFFSET
    w = np.where(stop_w.any(1), stop_w.argmax(1), SIZE)
    h = np.where(stop_h.any(1), stop_h.argmax(1), SIZE)
    not_colour = (t < COLOUR_OFFSET) | (t >= VOCAB_SIZE)
    bad_before = not_colour.cumsum(1, dtype=np.int16).cumsum(2, dtype=np.int16)  # count in t[:r+1, :c+1]
    ok = (h > 0) & (w > 0)
    rows = np.flatnonzero(ok)
    ok[rows] = bad_before[rows, h[rows] - 1, w[rows] - 1] == 0
    return [(t[n, :h[n], :w[n]] - COLOUR_OFFSET).astype(np.uint8) if ok[n] else None for n in range(len(t))]


def _check_inputs(example_indices: np.ndarray, preds: np.ndarray, q_halt: np.ndarray,
                  num_examples: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    idx = np.asarray(example_indices).reshape(-1)
    preds = np.asarray(preds)
    q = np.asarray(q_halt, dtype=np.float64).reshape(-1)
    n = len(idx)
    if preds.ndim != 2 or preds.shape != (n, SIZE * SIZE):
        raise DistlabError(f"ARC predictions must be ({n}, {SIZE * SIZE}) token ids, one row per example index; "
                           f"got {preds.shape}")
    if q.shape != (n,):
        raise DistlabError(f"q_halt needs one value per prediction ({n}), got {np.shape(q_halt)}")
    if not np.issubdtype(idx.dtype, np.integer) or (n and (idx.min() < 0 or idx.max() >= num_examples)):
        raise DistlabError(f"example_indices must be integers in [0, {num_examples}) (rows of the test split); "
                           "was the dataset rebuilt after predicting?")
    if not np.all(np.isfinite(q)):
        raise DistlabError("q_halt holds NaN or inf; pass the halt logits the model produced for each prediction")
    return idx.astype(np.int64), preds, q


def collect_votes(dataset_dir: str | os.PathLike, example_indices: np.ndarray, preds: np.ndarray,
                  q_halt: np.ndarray) -> dict[TestKey, TestVotes]:
    """Votes per (task, test index) for every test input of the dataset, predicted or not.

    ``example_indices[j]`` is the test-split row that ``preds[j]`` (900 token ids) answers, so
    predictions gathered from several ranks can arrive in any order, repeated or incomplete.
    """
    meta = load_arc_meta(dataset_dir)
    split = load_split(dataset_dir, "test")
    _, labels, pids = split.example_arrays()
    examples = meta["test_examples"]
    if len(examples) != split.num_examples:
        raise DistlabError(f"{dataset_dir}: arc_meta.json lists {len(examples)} test examples but the test split "
                           f"has {split.num_examples}; rebuild the dataset with `distlab data arc`")
    idx, preds, q = _check_inputs(example_indices, preds, q_halt, split.num_examples)
    specs = [p["aug"] if p else None for p in meta["puzzles"]]

    votes: dict[TestKey, TestVotes] = {}
    for i, ex in enumerate(examples):  # targets from every test example, so unpredicted inputs still count
        key = (ex["task"], int(ex["test_index"]))
        if key not in votes:
            votes[key] = TestVotes(target=inverse_aug(decode_grid(labels[i]), specs[int(pids[i])]))
    for row, (i, grid) in enumerate(zip(idx, decode_predictions(preds), strict=True)):
        ex = examples[i]
        tv = votes[(ex["task"], int(ex["test_index"]))]
        if grid is None:
            tv.malformed += 1
            continue
        grid = inverse_aug(grid, specs[int(pids[i])])
        cand = tv.candidates.setdefault(_grid_key(grid), Candidate(grid))
        cand.votes += 1
        cand.confidence_sum += float(q[row])
    return votes


def score_votes(votes: dict[TestKey, TestVotes], ks: tuple[int, ...] = DEFAULT_KS) -> dict:
    """pass@k over tasks (all test inputs solved) plus per-task detail; see the module docstring."""
    if not ks or any(int(k) < 1 for k in ks):
        raise DistlabError(f"ks must be positive integers, got {ks}")
    by_task: dict[str, list[tuple[int, TestVotes]]] = defaultdict(list)
    for (task, t), tv in votes.items():
        by_task[task].append((t, tv))
    per_task: dict[str, dict] = {}
    for task, tests in sorted(by_task.items()):
        tests.sort(key=lambda x: x[0])
        ranks = [tv.correct_rank() for _, tv in tests]
        per_task[task] = {
            "correct_rank": ranks,
            "candidates": [len(tv.candidates) for _, tv in tests],
            "votes": [sum(c.votes for c in tv.candidates.values()) for _, tv in tests],
            "malformed": [tv.malformed for _, tv in tests],
            # smallest k at which every test input is solved (None: some input never predicted right)
            "solved_at": None if any(r is None for r in ranks) else max(ranks),
        }
    n = len(per_task)
    result: dict = {}
    for k in ks:
        solved = sum(1 for p in per_task.values() if p["solved_at"] is not None and p["solved_at"] <= k)
        result[f"pass@{k}"] = solved / n if n else 0.0
    result["tasks"] = n
    result["test_inputs"] = len(votes)
    result["tasks_without_predictions"] = sum(1 for p in per_task.values() if sum(p["votes"]) == 0)
    result["per_task"] = per_task
    return result


def arc_pass_at_k(dataset_dir: str | os.PathLike, example_indices: np.ndarray, preds: np.ndarray,
                  q_halt: np.ndarray, ks: tuple[int, ...] = DEFAULT_KS) -> dict:
    """HRM's ARC metric for a built dataset: ``{"pass@1": fraction of tasks, ..., "tasks": n, "per_task": {...}}``.

    Every task with test inputs in ``dataset_dir`` is in the denominator, predicted or not, so a
    partial evaluation cannot inflate the score.
    """
    return score_votes(collect_votes(dataset_dir, example_indices, preds, q_halt), ks)


def top_candidates(votes: dict[TestKey, TestVotes], k: int = 2) -> dict[str, list[list[list[list[int]]]]]:
    """The ``k`` best grids per test input, per task (test-index order), e.g. for a submission file."""
    out: dict[str, list] = defaultdict(list)
    for (task, _), tv in sorted(votes.items()):
        out[task].append([c.grid.tolist() for c in tv.ranked()[:k]])
    return dict(out)
