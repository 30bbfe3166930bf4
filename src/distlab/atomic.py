"""Atomic file writes: results, reports, plots and checkpoints appear whole or not at all.

Everything a person or a resumed job reads is written to a temporary file beside its target and then
renamed over it, so a crash mid-write leaves the previous version intact.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """A temporary path beside ``path``; renamed onto it on success, removed on failure.

    The temporary name keeps ``path``'s suffix (or ``suffix``) so writers that pick a format from
    the extension (matplotlib, numpy) behave as they would on the real name.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix or path.suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        # mkstemp makes the file private (0600); the result gets the permissions any new file would get here
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_umask() -> int:
    """The process's umask, read by setting and restoring it (POSIX has no getter): done once, at import, before
    any thread of ours could create a file in between."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def json_safe(obj: Any) -> Any:
    """``obj`` with every NaN or infinity replaced by ``None``, so that ``json.dumps`` writes real JSON.

    Python's json writes ``NaN``/``Infinity``, which strict readers (jq, JavaScript, most dashboards) reject;
    a metric that has no value (a norm not computed, a ratio of nothing) is ``null`` instead.
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "item") and getattr(obj, "ndim", None) == 0:  # a numpy or torch scalar
        return json_safe(obj.item())
    return obj


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    text = json.dumps(json_safe(obj), indent=2, sort_keys=True, default=str, allow_nan=False)
    atomic_write_text(path, text + "\n")


def atomic_save_figure(fig: Any, path: str | os.PathLike, **savefig_kw: Any) -> Path:
    """``fig.savefig`` through a temporary file; returns ``path``."""
    path = Path(path)
    with atomic_path(path, path.suffix or ".png") as tmp:
        fig.savefig(tmp, format=(path.suffix.lstrip(".") or "png"), **savefig_kw)
    return path


@contextmanager
def exclusive_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold an advisory lock file across processes (``flock``); released when the holder exits or dies."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
