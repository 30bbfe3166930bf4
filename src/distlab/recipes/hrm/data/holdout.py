"""Sudoku holdouts fixed in a file before any tuning: a spec names the puzzles, the builder writes them.

A holdout is only a holdout if nobody chose it after seeing results. Its spec (``holdouts/NAME.yaml``) is committed
before any run is tuned and names everything that decides its puzzles: a generator seed used by nothing else and a
difficulty band, or a puzzle file. ``puzzles_sha256`` then pins the puzzles themselves, so a changed generator,
solver or file is refused in one line instead of silently giving another holdout.

The dataset is written in HRM's format with the holdout as its test split and an empty training split (nothing may
train on it), and it is checked against the datasets it must not share a puzzle with. The check compares exact
grids against every stored example of those datasets, augmented copies included (the code has no canonical form
of a grid up to Sudoku's symmetries).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from distlab.errors import DistlabError

from .format import SPLITS, load_split, save_json, write_identifiers
from .sudoku import SEQ_LEN, Row, encode, read_txt, write_sudoku_split
from .sudoku_generate import generate_puzzles

HOLDOUTS = Path(__file__).parent / "holdouts"
GENERATE = "generate"
_REQUIRED = {"name", "fixed_on", "puzzles", "puzzles_sha256", "source"}
_GENERATED = {"seed", "stream", "effort"}  # required when source is generate, refused otherwise


@dataclass(frozen=True)
class HoldoutSpec:
    """What decides a holdout's puzzles (see the module docstring); ``file`` is the spec it was read from."""

    name: str
    fixed_on: str
    puzzles: int
    puzzles_sha256: str
    source: str
    file: Path
    seed: int | None = None
    stream: int | None = None
    effort: tuple[int, int] | None = None


def known_holdouts() -> list[str]:
    return sorted(p.stem for p in HOLDOUTS.glob("*.yaml"))


def load_spec(name_or_path: str | os.PathLike) -> HoldoutSpec:
    """A spec by its name (``holdouts/NAME.yaml``) or a path to a YAML file, checked field by field."""
    path = Path(name_or_path)
    if not path.is_file():
        path = HOLDOUTS / f"{name_or_path}.yaml"
    if not path.is_file():
        raise DistlabError(f"--holdout {name_or_path}: no such spec; use one of {', '.join(known_holdouts())} or a "
                           f"path to a YAML spec")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise DistlabError(f"holdout spec {path} is not a mapping of fields; see {HOLDOUTS} for examples")
    generated = data.get("source") == GENERATE
    allowed = _REQUIRED | _GENERATED if generated else _REQUIRED
    missing = sorted((_REQUIRED | (_GENERATED if generated else set())) - set(data))
    unknown = sorted(set(data) - allowed)
    problems = [f"missing {', '.join(missing)}"] if missing else []
    if unknown:
        only = "" if generated else f" ({', '.join(sorted(_GENERATED))} apply to source: generate only)"
        problems.append(f"unknown {', '.join(unknown)}{only}")
    if problems:
        raise DistlabError(f"holdout spec {path}: {'; '.join(problems)}")
    effort = data.get("effort") if generated else None
    if generated and not (isinstance(effort, list) and len(effort) == 2 and all(isinstance(v, int) for v in effort)
                          and 0 <= effort[0] <= effort[1]):
        raise DistlabError(f"holdout spec {path}: effort must be [low, high], whole numbers with 0 <= low <= high, "
                           f"got {effort!r}")
    digest = data["puzzles_sha256"]
    if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
        raise DistlabError(f"holdout spec {path}: puzzles_sha256 must be 64 lower-case hex digits in quotes, got "
                           f"{digest!r}")
    for key in ("puzzles", *(("seed", "stream") if generated else ())):
        if not isinstance(data[key], int) or data[key] < 0:
            raise DistlabError(f"holdout spec {path}: {key} must be a whole number >= 0, got {data[key]!r}")
    return HoldoutSpec(name=str(data["name"]), fixed_on=str(data["fixed_on"]), puzzles=data["puzzles"],
                       puzzles_sha256=digest, source=str(data["source"]), file=path,
                       seed=data.get("seed"), stream=data.get("stream"), effort=tuple(effort) if effort else None)


def puzzles_sha256(rows: list[Row]) -> str:
    """The hash a spec pins: the puzzles as 81-digit lines (0 = blank), in order, joined by newlines."""
    return hashlib.sha256("\n".join("".join(map(str, p)) for p, _, _ in rows).encode()).hexdigest()


def holdout_rows(spec: HoldoutSpec, workers: int = 1, source: str | None = None) -> list[Row]:
    """The spec's puzzles, solutions and efforts, refused unless they hash to what the spec pinned.

    ``source`` reads a file spec's puzzles from another copy of the file (the hash still decides)."""
    if spec.source == GENERATE:
        if source not in (None, GENERATE):
            raise DistlabError(f"holdout {spec.name} is generated (seed {spec.seed}); drop --source {source}")
        low, high = spec.effort
        made = generate_puzzles(spec.puzzles, spec.seed, stream=spec.stream, min_difficulty=low,
                                max_difficulty=high, workers=workers)
        rows = [(p, s, float(e)) for p, s, e in made]
    else:
        path = Path(source or spec.source)
        if not path.is_file():
            raise DistlabError(f"holdout {spec.name}: puzzle file {path} not found (a relative path is read from "
                               f"the current folder, {Path.cwd()}); run from the repo root or pass --source PATH")
        rows = read_txt(path)
    if len(rows) != spec.puzzles:
        raise DistlabError(f"holdout {spec.name} gave {len(rows)} puzzles where its spec {spec.file} fixes "
                           f"{spec.puzzles}; the holdout is fixed: restore the generator or the file")
    digest = puzzles_sha256(rows)
    if digest != spec.puzzles_sha256:
        raise DistlabError(f"holdout {spec.name}: the puzzles hash to {digest[:12]}..., not to the "
                           f"{spec.puzzles_sha256[:12]}... its spec {spec.file.name} fixes (the generator, solver or "
                           f"file changed); the holdout is fixed: restore them, never edit the hash")
    return rows


def shared_puzzles(inputs: np.ndarray, other: str | os.PathLike) -> tuple[int, int]:
    """(examples compared, holdout rows found among them): exact grids against every stored example of ``other``."""
    other = Path(other)
    if not (other / "train" / "dataset.json").exists():
        raise DistlabError(f"--disjoint-from {other}: no HRM dataset there (train/dataset.json missing); pass the "
                           f"dataset folder the run trains on")
    seen: set[bytes] = set()
    compared = 0
    for split in SPLITS:
        if not (other / split / "dataset.json").exists():
            continue
        data = load_split(other, split)
        if data.metadata.seq_len != SEQ_LEN:
            raise DistlabError(f"--disjoint-from {other}: not a Sudoku dataset (seq_len {data.metadata.seq_len}, "
                               f"Sudoku has {SEQ_LEN})")
        rows = np.asarray(data.example_arrays()[0], dtype=np.uint8)
        seen.update(r.tobytes() for r in rows)
        compared += len(rows)
    return compared, sum(r.tobytes() in seen for r in np.asarray(inputs, dtype=np.uint8))


def build_holdout(spec: HoldoutSpec, output_dir: str | os.PathLike, disjoint_from: list[str] = (),
                  workers: int = 1, source: str | None = None, verbose: bool = True) -> dict:
    """Write the holdout dataset (test = the holdout, train empty) and ``holdout.json``; returns that record.

    Refused before anything is written when a puzzle also appears in a ``disjoint_from`` dataset."""
    rows = holdout_rows(spec, workers, source)
    inputs = np.stack([encode(p) for p, _, _ in rows])
    checks = []
    for other in disjoint_from:
        compared, shared = shared_puzzles(inputs, other)
        if shared:
            raise DistlabError(f"holdout {spec.name} shares {shared} of its {len(rows)} puzzles with {other} "
                               f"({compared} examples compared); a holdout must be unseen: build the training data "
                               f"from another seed or source")
        checks.append({"dataset": str(other), "examples_compared": compared, "shared": 0})
    rng = np.random.default_rng(0)  # no augmentation is drawn (num_aug 0); the writer's signature needs one
    write_sudoku_split(output_dir, "train", [], 0, rng)
    write_sudoku_split(output_dir, "test", rows, 0, rng)
    write_identifiers(output_dir, ["<blank>"])
    effort = np.array([r[2] for r in rows])
    record = {"name": spec.name, "fixed_on": spec.fixed_on, "spec": spec.file.name,
              "spec_sha256": hashlib.sha256(spec.file.read_bytes()).hexdigest(), "source": spec.source,
              "seed": spec.seed, "stream": spec.stream, "effort_band": list(spec.effort) if spec.effort else None,
              "puzzles": len(rows), "puzzles_sha256": spec.puzzles_sha256,
              "effort": {"min": float(effort.min()), "median": float(np.median(effort)), "max": float(effort.max())},
              "disjoint_from": checks}
    save_json(Path(output_dir) / "holdout.json", record)  # last: its presence says the dataset is complete
    if verbose:
        against = "; ".join(f"0 shared with {c['dataset']} ({c['examples_compared']} examples)" for c in checks)
        print(f"holdout {spec.name}: {len(rows)} puzzles, effort min/median/max {effort.min():g}/"
              f"{np.median(effort):g}/{effort.max():g}, written to {output_dir}"
              + (f"; {against}" if against else "; not checked against any training set (--disjoint-from)"))
    return record


def holdout_name(data_dir: str | os.PathLike) -> str | None:
    """The holdout a dataset folder holds (its ``holdout.json``), or None for an ordinary dataset."""
    path = Path(data_dir) / "holdout.json"
    if not path.exists():
        return None
    return json.loads(path.read_text()).get("name")
