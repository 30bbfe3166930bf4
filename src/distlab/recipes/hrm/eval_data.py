"""Scoring a run on other datasets' test splits (holdouts): which datasets, and whether the model can read them.

A model reads a dataset through its token vocabulary, sequence length and puzzle-identifier table: a test split
that differs in any of them would be scored with embeddings it never trained (or fail to load with a shape error
deep in the checkpoint code). Training records these for its own data in every checkpoint (``trained_on``), and
each dataset to score is checked against them, in one line, before the model is built.

``distlab eval RUN data.path=DIR`` scores DIR's test split instead of the run's own; ``eval.also=[DIR, ...]`` scores
more test splits after the first in the same process (training's final evaluation does the same), so a holdout
costs no second start-up or compilation. Every evaluation keeps the run's test-time sampling settings (``eval.*``).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from distlab.errors import DistlabError
from distlab.recipes.hrm.data.format import PuzzleMetadata, load_metadata, load_split
from distlab.recipes.hrm.data.holdout import holdout_name

TRAINED_ON = "trained_on"  # the checkpoint counter holding the training data's signature
MODEL_KEYS = ("vocab_size", "seq_len", "num_puzzle_identifiers")  # what the model's shapes are built from


def model_metadata(meta: PuzzleMetadata) -> dict:
    """The dataset fields the model is built from."""
    return {k: getattr(meta, k) for k in MODEL_KEYS}


def data_signature(data_dir: str | Path, split: str = "train") -> dict:
    """What a model trained on ``data_dir`` can read: its shapes and the list of puzzle identifiers (hashed)."""
    ids = Path(data_dir) / "identifiers.json"
    digest = hashlib.sha256(json.dumps(json.loads(ids.read_text())).encode()).hexdigest() if ids.exists() else None
    return {"path": str(data_dir), **model_metadata(load_metadata(data_dir, split)), "identifiers_sha256": digest}


def check_readable(reference: dict, data_dir: str | Path, whose: str = "the training data") -> None:
    """Refuse, in one line, a test split that a model built for ``reference`` (``whose`` data) cannot read."""
    found = data_signature(data_dir, "test")
    names = {"identifiers_sha256": "puzzle identifiers"}
    keys = [k for k in (*MODEL_KEYS, "identifiers_sha256")
            if None not in (reference.get(k), found[k]) and reference[k] != found[k]]
    if keys:
        def values(sig: dict) -> str:
            return ", ".join(f"{names.get(k, k)} {sig[k]!s:.12}" for k in keys)
        raise DistlabError(f"cannot score {data_dir}: it has {values(found)} where {whose} ({reference['path']}) has "
                           f"{values(reference)}; score only datasets built like it (same puzzle kind and size)")


def trained_signature(ckpt: Path) -> dict | None:
    """The training data's signature a checkpoint recorded (None for checkpoints written before it was)."""
    return json.loads((Path(ckpt) / "extra.json").read_text()).get(TRAINED_ON)


def run_signature(run_dir: Path) -> dict | None:
    """The training data's signature recorded by the newest checkpoint of ``run_dir`` (None: none recorded yet)."""
    from distlab.run.rundir import checkpoints_dir

    found = sorted(checkpoints_dir(Path(run_dir)).glob("step*/extra.json"))
    return json.loads(found[-1].read_text()).get(TRAINED_ON) if found else None


def check_before_start(cfg, data_dir: Path, built: bool) -> None:
    """What can be checked in the launching process: data.path and ``eval.also`` against the data the run's
    checkpoints were trained on (``distlab eval``, a resume), else ``eval.also`` against data.path (a new run)."""
    trained = run_signature(Path(cfg.run.dir) / cfg.run.name) if cfg.run.name else None  # None: not named yet
    if trained is not None:
        if built:
            check_readable(trained, data_dir)
        check_also(cfg, trained)
    else:
        check_also(cfg, data_signature(data_dir) if built else None, "data.path")


def label(data_dir: str | Path) -> dict:
    """How results name the dataset they scored: its folder, and the holdout it holds if it is one."""
    name = holdout_name(data_dir)
    return {"dataset": str(data_dir), **({"holdout": name} if name else {})}


def short_name(data_dir: str | Path) -> str:
    return holdout_name(data_dir) or Path(data_dir).name


def check_also(cfg, reference: dict | None, whose: str = "the training data") -> None:
    """``eval.also``: built test splits, distinct folder names (each gets its own report folder), each readable by a
    model built for ``reference`` (skipped when None)."""
    seen: dict[str, str] = {}
    for path in cfg.eval.also:
        if not (Path(path) / "test" / "dataset.json").exists():
            raise DistlabError(f"eval.also: {path} holds no test/dataset.json; build it first (distlab data sudoku "
                               f"--holdout SPEC --output-dir {path}) or drop it from eval.also")
        name = Path(path).name
        if name in seen:
            raise DistlabError(f"eval.also names two datasets in folders called {name} ({seen[name]}, {path}); their "
                               f"reports would share one folder: rename one")
        seen[name] = str(path)
        if reference is not None:
            check_readable(reference, path, whose)


def timed_evaluate(cfg, session, model, split, save_dir: Path | None) -> dict:
    """``evaluate`` with its wall time (rank 0's clock; a first evaluation includes compiling the model)."""
    from distlab.recipes.hrm.evaluation import evaluate

    t0 = time.perf_counter()
    metrics = evaluate(cfg, session, model, split, save_dir=save_dir)
    return {**metrics, "eval_wall_s": time.perf_counter() - t0}


def score_also(cfg, session, model, save_root: Path | None) -> dict[str, dict]:
    """Each ``eval.also`` test split scored by ``model`` as it is (the caller applies the EMA weights); the
    per-example reports go to ``save_root/also/<folder>/``."""
    return {str(path): {**label(path), **timed_evaluate(cfg, session, model, load_split(path, "test"),
                                                        save_root / "also" / Path(path).name if save_root else None)}
            for path in cfg.eval.also}
