"""A user's own tasks from a Hugging Face ``datasets`` directory written by ``save_to_disk`` (``task.train=DIR``).

The rows follow the JSONL loader's task schema (:mod:`.jsonl`): ``prompt`` (TRL's standard layout, a string, or
its conversational one, a list of ``{"role", "content"}`` messages), ``tests`` (Python asserts run after the program,
as a string or a list of strings) or, for math problems, ``answer``, and optional ``task_id`` (default
``<dir>/<row>``), ``entry_point``, ``visible_test``, ``solution`` and ``source``; other columns are ignored. A
``DatasetDict`` directory (``dataset_dict.json``) is read at ``task.train_split`` / ``task.eval_split``. The Arrow
files are read with ``pyarrow`` (which ``datasets`` installs), not with ``datasets`` itself. Every row is checked
before any process starts.
"""

from __future__ import annotations

import json
from pathlib import Path

from distlab.errors import DistlabError
from distlab.recipes.lm.tasks.jsonl import NEEDS, task_from_row, unique_tasks
from distlab.recipes.lm.tasks.task import Task

WHAT = "task.train/task.eval name a .jsonl file or a directory saved with Dataset.save_to_disk"


def is_dataset_dir(source: str) -> bool:
    """Whether a task source names a directory (a path), as opposed to a built-in set or a .jsonl file."""
    s = str(source)
    return not s.endswith(".jsonl") and ("/" in s or "\\" in s or Path(s).is_dir())


def _split_dir(root: Path, split: str) -> Path:
    if (root / "state.json").is_file():
        return root
    listing = root / "dataset_dict.json"
    if not listing.is_file():
        raise DistlabError(f"task data {root} is not a datasets directory (no state.json or dataset_dict.json); "
                           f"{WHAT}")
    try:
        splits = [str(s) for s in json.loads(listing.read_text())["splits"]]
    except (OSError, ValueError, KeyError, TypeError):
        raise DistlabError(f"task data {listing} is unreadable; save the dataset again with save_to_disk") from None
    if split not in splits:
        raise DistlabError(f"task data {root} has no split {split!r} (it has {', '.join(splits)}); set "
                           f"task.train_split / task.eval_split to one of them")
    return root / split


def _read_table(d: Path):
    try:
        import pyarrow as pa
    except ImportError:
        raise DistlabError(f"reading the datasets directory {d} needs pyarrow: pip install pyarrow") from None
    try:
        state = json.loads((d / "state.json").read_text())
        files = [d / f["filename"] for f in state["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError):
        raise DistlabError(f"task data {d / 'state.json'} is unreadable; save the dataset again with "
                           f"save_to_disk") from None
    tables = []
    for f in files:
        try:
            with pa.memory_map(str(f)) as source:
                tables.append(pa.ipc.open_stream(source).read_all())
        except (OSError, pa.ArrowInvalid) as exc:
            raise DistlabError(f"task data {f} cannot be read ({str(exc).splitlines()[0]}); save the dataset "
                               f"again with save_to_disk") from None
    if not tables:
        raise DistlabError(f"task data {d} holds no data files")
    return pa.concat_tables(tables)


def _missing_columns(columns: list[str]) -> list[str]:
    """Checked on the table so a dataset of the wrong layout is one line, not an error on its first row."""
    wanted = ["prompt"] + ([] if "tests" in columns or "answer" in columns else ["tests"])
    return [c for c in wanted if c not in columns]


def load_saved_dataset(path: str | Path, split: str = "train") -> list[Task]:
    """Every row of the dataset (of ``split`` for a DatasetDict) as a task; a one-line error for anything wrong."""
    root = Path(path)
    if not root.is_dir():
        raise DistlabError(f"task data directory {root} not found" + (" (it is a file)" if root.exists() else "")
                           + f"; {WHAT}")
    d = _split_dir(root, split)
    table = _read_table(d)
    missing = _missing_columns(table.column_names)
    if missing:
        raise DistlabError(f"task data {d}: missing column{'s' * (len(missing) > 1)} "
                           f"{', '.join(repr(c) for c in missing)} (has {', '.join(table.column_names)}); "
                           f"each row needs {NEEDS}")
    stem = root.name if d == root else f"{root.name}/{split}"
    rows = ((row, f"{d} row {i}", i) for i, row in enumerate(table.to_pylist()))
    return unique_tasks(((task_from_row(row, where, f"{stem}/{i}", source="dataset"), where) for row, where, i in rows),
                        f"task data {d}", "rows")
