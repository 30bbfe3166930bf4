"""HRM's on-disk puzzle dataset format (sapientinc/HRM ``dataset/common.py`` and builders).

A dataset directory looks like::

    DIR/identifiers.json                 list of puzzle-identifier names, index = id, 0 = "<blank>"
    DIR/{train,test}/dataset.json        PuzzleMetadata
    DIR/{split}/{set}__inputs.npy        (num_examples, seq_len) integer tokens
    DIR/{split}/{set}__labels.npy        (num_examples, seq_len) integer tokens
    DIR/{split}/{set}__puzzle_identifiers.npy   (num_puzzles,) int32, one id per puzzle
    DIR/{split}/{set}__puzzle_indices.npy       (num_puzzles + 1,) int32 example offsets, leading 0
    DIR/{split}/{set}__group_indices.npy        (num_groups + 1,) int32 puzzle offsets, leading 0
    DIR/{split}/{set}__difficulty.npy    (num_examples,) float32 -- distlab extension, HRM ignores it

Examples of puzzle ``p`` are rows ``puzzle_indices[p]:puzzle_indices[p+1]``; puzzles of group ``g``
(an original puzzle and its augmentations) are ``group_indices[g]:group_indices[g+1]``. We keep
the layout byte-compatible so datasets built by HRM's own scripts load here unchanged and ours
load in HRM.

Label convention: a label equal to ``metadata.ignore_label_id`` (the pad token in every HRM
dataset) is not a target. The trainer maps those positions to ``-100`` at batch time (the
PyTorch cross-entropy ignore index); the files keep HRM's raw values.
"""

from __future__ import annotations

import csv
import json
import os
import zipfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from distlab.atomic import atomic_path
from distlab.errors import DistlabError
from distlab.runtime.epoch_order import ExampleGroups

SPLITS = ("train", "test")
ARRAY_NAMES = ("inputs", "labels", "puzzle_identifiers", "puzzle_indices", "group_indices")
DIFFICULTY = "difficulty"
BUILD_HINT = "build it with `distlab data sudoku|maze|arc --output-dir DIR`"


@dataclass
class PuzzleMetadata:
    """Same fields and meaning as HRM's ``PuzzleDatasetMetadata`` (one ``dataset.json`` per split)."""

    pad_id: int
    ignore_label_id: int | None
    blank_identifier_id: int
    vocab_size: int
    seq_len: int
    num_puzzle_identifiers: int
    total_groups: int
    mean_puzzle_examples: float
    sets: list[str] = field(default_factory=lambda: ["all"])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "dataset.json") -> PuzzleMetadata:
        names = {f.name for f in fields(cls)}
        missing = sorted(names - set(data))
        if missing:
            raise DistlabError(f"{source} lacks fields {missing}; rebuild the dataset ({BUILD_HINT})")
        return cls(**{k: data[k] for k in names})


# ----------------------------------------------------------------------------- atomic writes

def _atomic_write(path: Path, write: Any, mode: str = "wb") -> None:
    """Write via a temp file in the same directory so readers never see half a file."""
    with atomic_path(path, ".tmp") as tmp, open(tmp, mode) as fh:
        write(fh)


def save_npy(path: Path, array: np.ndarray) -> None:
    _atomic_write(Path(path), lambda fh: np.save(fh, array, allow_pickle=False))


def save_json(path: Path, data: Any) -> None:
    _atomic_write(Path(path), lambda fh: json.dump(data, fh), mode="w")


# ----------------------------------------------------------------------------- writing

def write_split(
    directory: str | os.PathLike,
    split: str,
    set_name: str,
    inputs: np.ndarray,
    labels: np.ndarray,
    puzzle_identifiers: np.ndarray,
    puzzle_indices: np.ndarray,
    group_indices: np.ndarray,
    metadata: PuzzleMetadata,
    difficulty: np.ndarray | None = None,
) -> Path:
    """Write one set of one split, checking the offsets first (a bad offset corrupts training silently)."""
    inputs, labels = np.asarray(inputs), np.asarray(labels)
    pids = np.asarray(puzzle_identifiers, dtype=np.int32)
    pidx = np.asarray(puzzle_indices, dtype=np.int32)
    gidx = np.asarray(group_indices, dtype=np.int32)
    n = len(inputs)
    if inputs.shape != labels.shape or inputs.ndim != 2 or inputs.shape[1] != metadata.seq_len:
        raise ValueError(f"inputs {inputs.shape} / labels {labels.shape} must both be (N, {metadata.seq_len})")
    if pidx[0] != 0 or pidx[-1] != n or np.any(np.diff(pidx) < 1) or len(pids) != len(pidx) - 1:
        raise ValueError("puzzle_indices must start at 0, end at num_examples and grow; one identifier per puzzle")
    if gidx[0] != 0 or gidx[-1] != len(pids) or np.any(np.diff(gidx) < 1):
        raise ValueError("group_indices must start at 0, end at num_puzzles and grow")
    out = Path(directory) / split
    arrays = dict(inputs=inputs, labels=labels, puzzle_identifiers=pids, puzzle_indices=pidx, group_indices=gidx)
    if difficulty is not None:
        difficulty = np.asarray(difficulty, dtype=np.float32)
        if difficulty.shape != (n,):
            raise ValueError(f"difficulty must have one value per example ({n}), got {difficulty.shape}")
        arrays[DIFFICULTY] = difficulty
    for name, arr in arrays.items():
        save_npy(out / f"{set_name}__{name}.npy", arr)
    meta = metadata.to_dict()
    path = out / "dataset.json"
    if path.exists():  # several sets in one split: keep the union of set names
        old = json.loads(path.read_text())
        meta["sets"] = list(dict.fromkeys(list(old.get("sets", [])) + list(meta["sets"])))
    if set_name not in meta["sets"]:
        meta["sets"].append(set_name)
    save_json(path, meta)
    return out


def write_identifiers(directory: str | os.PathLike, names: list[str]) -> None:
    """``identifiers.json``: HRM uses it only to name puzzles when visualising; index = identifier."""
    save_json(Path(directory) / "identifiers.json", list(names))


class SplitBuilder:
    """Accumulates puzzles (each a list of (input, label) examples) grouped with their augmentations.

    Rows are kept as array blocks so a builder can add thousands of one-example puzzles in one call
    (``add_single_example_puzzles``): 1M Sudoku examples added one by one cost more than making them.
    """

    def __init__(self, seq_len: int, dtype: Any = np.uint8) -> None:
        self.seq_len = seq_len
        self.dtype = dtype
        self._inputs: list[np.ndarray] = []
        self._labels: list[np.ndarray] = []
        self._difficulty: list[np.ndarray] = []
        self._identifiers: list[np.ndarray] = []
        self._puzzle_ends: list[np.ndarray] = []  # example offset after each puzzle
        self.group_indices: list[int] = [0]
        self._num_examples = 0
        self._num_puzzles = 0

    def _rows(self, rows: Any, n: int) -> np.ndarray:
        return np.asarray(rows, dtype=self.dtype).reshape(n, self.seq_len)

    def add_puzzle(self, examples: list[tuple[np.ndarray, np.ndarray]], identifier: int = 0,
                   difficulty: float | list[float] = float("nan")) -> None:
        if not examples:
            raise ValueError("a puzzle needs at least one example")
        diffs = difficulty if isinstance(difficulty, list) else [difficulty] * len(examples)
        if len(diffs) != len(examples):
            raise ValueError(f"{len(diffs)} difficulties for {len(examples)} examples")
        n = len(examples)
        self._append(self._rows([e[0] for e in examples], n), self._rows([e[1] for e in examples], n),
                     np.asarray(diffs, np.float32), np.array([identifier], np.int32),
                     np.array([self._num_examples + n], np.int64))

    def add_single_example_puzzles(self, inputs: np.ndarray, labels: np.ndarray, identifier: int = 0,
                                   difficulty: float = float("nan")) -> None:
        """Add ``len(inputs)`` puzzles of one example each (e.g. augmented copies) in one call."""
        n = len(inputs)
        if n == 0:
            return
        self._append(self._rows(inputs, n), self._rows(labels, n), np.full(n, difficulty, np.float32),
                     np.full(n, identifier, np.int32), self._num_examples + np.arange(1, n + 1, dtype=np.int64))

    def _append(self, inputs: np.ndarray, labels: np.ndarray, difficulty: np.ndarray, identifiers: np.ndarray,
                ends: np.ndarray) -> None:
        self._inputs.append(inputs)
        self._labels.append(labels)
        self._difficulty.append(difficulty)
        self._identifiers.append(identifiers)
        self._puzzle_ends.append(ends)
        self._num_examples += len(inputs)
        self._num_puzzles += len(identifiers)

    def end_group(self) -> None:
        """Close the current group (the original puzzle plus the augmentations added since)."""
        if self.group_indices[-1] == self._num_puzzles:
            raise ValueError("end_group() called on an empty group")
        self.group_indices.append(self._num_puzzles)

    def add_group(self, puzzles: list[tuple[list[tuple[np.ndarray, np.ndarray]], int]],
                  difficulty: float = float("nan")) -> None:
        for examples, identifier in puzzles:
            self.add_puzzle(examples, identifier, difficulty)
        self.end_group()

    @property
    def num_examples(self) -> int:
        return self._num_examples

    @property
    def num_groups(self) -> int:
        return len(self.group_indices) - 1

    @staticmethod
    def _cat(parts: list[np.ndarray], empty: np.ndarray) -> np.ndarray:
        return np.concatenate(parts) if parts else empty

    def arrays(self) -> dict[str, np.ndarray]:
        if self.group_indices[-1] != self._num_puzzles:
            raise ValueError("the last group is still open: call end_group()")
        empty = np.zeros((0, self.seq_len), self.dtype)
        ends = self._cat(self._puzzle_ends, np.zeros(0, np.int64))
        return dict(
            inputs=self._cat(self._inputs, empty),
            labels=self._cat(self._labels, empty),
            puzzle_identifiers=self._cat(self._identifiers, np.zeros(0, np.int32)),
            puzzle_indices=np.concatenate([[0], ends]).astype(np.int32),
            group_indices=np.array(self.group_indices, np.int32),
        )

    def write(self, directory: str | os.PathLike, split: str, metadata: PuzzleMetadata,
              set_name: str = "all", with_difficulty: bool = True) -> Path:
        """Write the split; ``total_groups``/``mean_puzzle_examples`` are filled in from the data."""
        arrays = self.arrays()
        num_puzzles = self._num_puzzles
        metadata.total_groups = self.num_groups
        metadata.mean_puzzle_examples = self.num_examples / num_puzzles if num_puzzles else 0.0
        diff = self._cat(self._difficulty, np.zeros(0, np.float32)) if with_difficulty else None
        return write_split(directory, split, set_name, metadata=metadata, difficulty=diff, **arrays)


# ----------------------------------------------------------------------------- loading

@dataclass
class PuzzleSet:
    """Arrays of one set; ``inputs``/``labels`` are memory-mapped like HRM's loader does."""

    name: str
    inputs: np.ndarray
    labels: np.ndarray
    puzzle_identifiers: np.ndarray
    puzzle_indices: np.ndarray
    group_indices: np.ndarray
    difficulty: np.ndarray | None

    @property
    def num_examples(self) -> int:
        return int(self.inputs.shape[0])

    def problem(self) -> str | None:
        """What makes these arrays inconsistent with each other (a dataset written by hand or cut short)."""
        if self.inputs.ndim != 2 or self.inputs.shape != self.labels.shape:
            return f"inputs {tuple(self.inputs.shape)} and labels {tuple(self.labels.shape)} differ in shape"
        ends = (int(self.puzzle_indices[-1]) if len(self.puzzle_indices) else -1,
                int(self.group_indices[-1]) if len(self.group_indices) else -1)
        if ends[0] != self.num_examples or len(self.puzzle_indices) != len(self.puzzle_identifiers) + 1:
            return (f"puzzle_indices ends at {ends[0]} for {self.num_examples} examples and has "
                    f"{len(self.puzzle_indices)} entries for {len(self.puzzle_identifiers)} puzzles")
        if ends[1] != len(self.puzzle_identifiers):
            return f"group_indices ends at {ends[1]} for {len(self.puzzle_identifiers)} puzzles"
        if self.difficulty is not None and len(self.difficulty) != self.num_examples:
            return f"difficulty has {len(self.difficulty)} entries for {self.num_examples} examples"
        return None

    def example_puzzle_identifiers(self) -> np.ndarray:
        """Identifier of each example's puzzle (HRM stores one per puzzle)."""
        return np.repeat(self.puzzle_identifiers, np.diff(self.puzzle_indices))


@dataclass
class PuzzleSplit:
    """One loaded split. Labels are raw: positions equal to ``metadata.ignore_label_id`` are
    ignored by the loss (the trainer turns them into -100 when batching)."""

    directory: Path
    split: str
    metadata: PuzzleMetadata
    sets: dict[str, PuzzleSet]
    _offsets: np.ndarray = field(init=False, repr=False)
    _example_ids: list[np.ndarray] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        sizes = [s.num_examples for s in self.sets.values()]
        self._offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._example_ids = [s.example_puzzle_identifiers() for s in self.sets.values()]

    @property
    def num_examples(self) -> int:
        return int(self._offsets[-1])

    def _locate(self, i: int) -> tuple[PuzzleSet, int, int]:
        if not 0 <= i < self.num_examples:
            raise IndexError(f"example {i} out of range [0, {self.num_examples})")
        k = int(np.searchsorted(self._offsets, i, side="right")) - 1
        return list(self.sets.values())[k], k, i - int(self._offsets[k])

    def example(self, i: int) -> tuple[np.ndarray, np.ndarray, int]:
        """``(inputs[i], labels[i], puzzle_identifier[i])`` across all sets in order."""
        s, k, j = self._locate(i)
        return np.asarray(s.inputs[j]), np.asarray(s.labels[j]), int(self._example_ids[k][j])

    def example_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-example ``inputs, labels, puzzle_identifiers`` for all sets (memory-mapped when one set)."""
        sets = list(self.sets.values())
        if len(sets) == 1:
            return sets[0].inputs, sets[0].labels, self._example_ids[0]
        return (np.concatenate([s.inputs for s in sets]), np.concatenate([s.labels for s in sets]),
                np.concatenate(self._example_ids))

    def example_groups(self) -> ExampleGroups:
        """Groups (an original puzzle and its augmentations) of puzzles (members) of examples, over all
        sets in order: what HRM's loader draws from, one puzzle per group per epoch."""
        groups, members, n_examples, n_puzzles = [np.zeros(1, np.int64)], [np.zeros(1, np.int64)], 0, 0
        for s in self.sets.values():
            groups.append(np.asarray(s.group_indices[1:], np.int64) + n_puzzles)
            members.append(np.asarray(s.puzzle_indices[1:], np.int64) + n_examples)
            n_puzzles += len(s.puzzle_identifiers)
            n_examples += s.num_examples
        return ExampleGroups(np.concatenate(groups), np.concatenate(members))

    @property
    def examples_per_epoch(self) -> float:
        """HRM's epoch size, ``total_groups x mean_puzzle_examples`` (its ``pretrain.py`` step count)."""
        num_puzzles = sum(len(s.puzzle_identifiers) for s in self.sets.values())
        num_groups = sum(len(s.group_indices) - 1 for s in self.sets.values())
        return num_groups * self.num_examples / num_puzzles

    @property
    def difficulty(self) -> np.ndarray | None:
        """Per-example difficulty (our extension) or None when any set lacks it (HRM-built data)."""
        parts = [s.difficulty for s in self.sets.values()]
        if any(p is None for p in parts):
            return None
        return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _need(path: Path) -> Path:
    if not path.exists():
        raise DistlabError(f"dataset file {path} not found; {BUILD_HINT}")
    return path


def load_metadata(directory: str | os.PathLike, split: str) -> PuzzleMetadata:
    path = _need(Path(directory) / split / "dataset.json")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise DistlabError(f"{path} is not valid JSON ({e}); rebuild it ({BUILD_HINT})") from e
    return PuzzleMetadata.from_dict(data, str(path))


def load_split(directory: str | os.PathLike, split: str, mmap: bool = True) -> PuzzleSplit:
    """Load ``DIR/split`` with inputs/labels memory-mapped (datasets with 1000 ARC augmentations are GBs)."""
    root = Path(directory)
    if not root.is_dir():
        raise DistlabError(f"dataset directory {root} not found; {BUILD_HINT}")
    if split not in SPLITS:
        raise DistlabError(f"unknown split {split!r}; use one of {list(SPLITS)}")
    metadata = load_metadata(root, split)
    sets = {}
    for name in metadata.sets:
        def arr(kind: str, big: bool = False) -> np.ndarray:
            return _load_npy(_need(root / split / f"{name}__{kind}.npy"), mmap=big and mmap)
        diff_path = root / split / f"{name}__{DIFFICULTY}.npy"
        sets[name] = PuzzleSet(
            name=name, inputs=arr("inputs", True), labels=arr("labels", True),
            puzzle_identifiers=arr("puzzle_identifiers"), puzzle_indices=arr("puzzle_indices"),
            group_indices=arr("group_indices"), difficulty=_load_npy(diff_path) if diff_path.exists() else None)
        problem = sets[name].problem()
        if problem:
            raise DistlabError(f"dataset {root / split} set {name!r} is inconsistent: {problem}; {BUILD_HINT}")
    return PuzzleSplit(directory=root, split=split, metadata=metadata, sets=sets)


def _load_npy(path: Path, mmap: bool = False) -> np.ndarray:
    """``np.load`` that names a truncated or foreign file in one line instead of numpy's traceback."""
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:  # np.load reads a 'PK' file as .npz
        raise DistlabError(f"{path} is not a readable .npy array ({e}); rebuild the dataset ({BUILD_HINT})") from None


def load_identifiers(directory: str | os.PathLike) -> list[str]:
    return json.loads(_need(Path(directory) / "identifiers.json").read_text())


def read_headed_csv(path: str | os.PathLike, columns: list[str], kind: str) -> Iterator[list[str]]:
    """Records of a CSV whose first columns must be ``columns`` (HRM's puzzle CSVs), header checked."""
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:len(columns)]] != columns:
            raise DistlabError(f"{path}: expected a header '{','.join(columns)}' ({kind} CSV)")
        yield from reader
