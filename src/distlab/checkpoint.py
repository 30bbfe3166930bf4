"""Checkpoints on ``torch.distributed.checkpoint`` that survive crashes, preemption and resharding.

A checkpoint is written into a hidden temporary directory, sealed with a manifest of file sizes and
hashes, then renamed into place and pointed to by ``latest``; a crash mid-write leaves the previous
checkpoint untouched. On restore, a checkpoint whose files no longer match its manifest (truncated,
corrupted) is skipped with a warning and the one before it is used. Model and optimizer state go
through DCP's state-dict helpers, so a run saved on N ranks (DDP or FSDP2) loads on M ranks.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from distlab.atomic import atomic_path, atomic_write_json, atomic_write_text
from distlab.dist import Runtime
from distlab.errors import DistlabError

log = logging.getLogger("distlab")
# A single process saving without a process group is intended here, not a mistake worth a warning.
warnings.filterwarnings("ignore", message="torch.distributed is disabled")
STEP_DIR = re.compile(r"^step(\d{8})$")
MANIFEST = "MANIFEST.json"


def _file_digest(path: Path, mode: str) -> str:
    if mode == "size":
        return ""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _seal(directory: Path, mode: str) -> None:
    files = {}
    for p in sorted(directory.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            files[str(p.relative_to(directory))] = {"size": p.stat().st_size, "hash": _file_digest(p, mode)}
    atomic_write_json(directory / MANIFEST, {"files": files, "verify": mode})


def verify_checkpoint(directory: Path) -> str | None:
    """None if the directory matches its manifest, else the reason it cannot be trusted."""
    man = directory / MANIFEST
    if not man.exists():
        return "no manifest (write never finished)"
    try:
        spec = json.loads(man.read_text())
    except (OSError, ValueError):
        return "manifest unreadable"
    for rel, info in spec["files"].items():
        p = directory / rel
        if not p.exists():
            return f"{rel} missing"
        if p.stat().st_size != info["size"]:
            return f"{rel} has {p.stat().st_size} bytes, expected {info['size']} (truncated?)"
        if info["hash"] and _file_digest(p, spec.get("verify", "hash")) != info["hash"]:
            return f"{rel} content changed (corrupted)"
    return None


def _rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


class CheckpointManager:
    """Save/restore model, optimizers, per-rank RNG and a JSON ``extra`` (step, data position, config)."""

    def __init__(self, root: Path, rt: Runtime, keep_last: int = 3, async_save: bool = False,
                 verify: str = "hash") -> None:
        if keep_last < 1:
            raise DistlabError(f"ckpt.keep_last={keep_last} would delete every checkpoint; use 1 or more")
        if verify not in ("hash", "size"):
            raise DistlabError(f"ckpt.verify={verify!r} is not one of hash, size")
        self.root, self.rt, self.keep_last, self.async_save, self.verify = Path(root), rt, keep_last, async_save, verify
        self._pending: tuple[Any, Path, Path] | None = None
        if rt.is_main:
            self.root.mkdir(parents=True, exist_ok=True)

    # -- listing -----------------------------------------------------------------------------
    def steps(self) -> list[Path]:
        if not self.root.exists():
            return []
        dirs = [p for p in self.root.iterdir() if p.is_dir() and STEP_DIR.match(p.name)]
        return sorted(dirs, key=lambda p: int(STEP_DIR.match(p.name).group(1)))

    def latest_valid(self) -> Path | None:
        """Newest checkpoint that passes verification; warns about each one skipped."""
        for d in reversed(self.steps()):
            problem = verify_checkpoint(d)
            if problem is None:
                return d
            log.warning("checkpoint %s is unusable (%s); falling back to the previous one", d.name, problem)
        return None

    # -- save --------------------------------------------------------------------------------
    def save(self, step: int, model: torch.nn.Module, optimizers: list[torch.optim.Optimizer],
             extra: dict, rank_state: dict | None = None) -> None:
        """Collective: every rank calls it at the same step.

        ``rank_state`` is this rank's own state (e.g. a recurrent carry); it comes back from
        :meth:`restore` only on the same world size, where rank r is the same slice of the data.
        """
        self.wait()
        final = self.root / f"step{step:08d}"
        tmp = self.root / f".tmp-step{step:08d}"
        if self.rt.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
            (tmp / "rng").mkdir(parents=True)
        self.rt.barrier("checkpoint start")
        msd, osd = get_state_dict(model, optimizers)
        state = {"model": msd, "optim": osd}
        torch.save({"rng": _rng_state(), "state": rank_state}, tmp / "rng" / f"rank{self.rt.rank}.pt")
        if self.rt.is_main:
            meta = dict(extra, step=step, world_size=self.rt.world_size)
            atomic_write_json(tmp / "extra.json", meta)
        if self.async_save:
            fut = dcp.async_save(state, checkpoint_id=str(tmp), process_group=self.rt._monitor)
            self._pending = (fut, tmp, final)
        else:
            dcp.save(state, checkpoint_id=str(tmp))
            self._finalize(tmp, final)

    def wait(self) -> None:
        """Finish an async save (seal, rename, prune); a no-op when none is in flight."""
        if self._pending is None:
            return
        fut, tmp, final = self._pending
        self._pending = None
        fut.result()
        self._finalize(tmp, final)

    def _finalize(self, tmp: Path, final: Path) -> None:
        self.rt.barrier("checkpoint written")
        if self.rt.is_main:
            _seal(tmp, self.verify)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            atomic_write_text(self.root / "latest", final.name + "\n")
            for old in self.steps()[:-self.keep_last]:
                shutil.rmtree(old, ignore_errors=True)
            log.info("saved checkpoint %s", final)
        self.rt.barrier("checkpoint sealed")

    # -- restore -----------------------------------------------------------------------------
    def restore(self, model: torch.nn.Module, optimizers: list[torch.optim.Optimizer],
                path: Path | None = None) -> dict | None:
        """Load the newest valid checkpoint (or ``path``); return its ``extra`` or None if none exists."""
        choice = str(path) if path else None
        if choice is None and self.rt.is_main:
            found = self.latest_valid()
            choice = str(found) if found else None
        choice = self.rt.broadcast_object(choice)
        if choice is None:
            return None
        ckpt = Path(choice)
        msd, osd = get_state_dict(model, optimizers)
        state = {"model": msd, "optim": osd}
        dcp.load(state, checkpoint_id=str(ckpt))
        set_state_dict(model, optimizers, model_state_dict=state["model"], optim_state_dict=state["optim"])
        extra = json.loads((ckpt / "extra.json").read_text())
        rng_file = ckpt / "rng" / f"rank{self.rt.rank}.pt"
        if extra.get("world_size") == self.rt.world_size and rng_file.exists():
            saved = torch.load(rng_file, weights_only=False, map_location=self.rt.device)
            _set_rng_state({k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in saved["rng"].items()})
            extra["rank_state"] = saved["state"]
        else:  # new world size: per-rank streams cannot be mapped, so derive fresh ones deterministically
            seed = hash((extra.get("step", 0), self.rt.rank)) % 2**31
            random.seed(seed), np.random.seed(seed), torch.manual_seed(seed)
        log.info("resumed from %s (step %s)", ckpt, extra.get("step"))
        return extra


def export_model(checkpoint: Path, out: Path) -> Path:
    """Consolidate a (possibly sharded) DCP checkpoint's model weights into one ``torch.save`` file."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    problem = verify_checkpoint(checkpoint)
    if problem:
        raise DistlabError(f"cannot export {checkpoint}: {problem}")
    with tempfile.TemporaryDirectory() as td:
        full = Path(td) / "full.pt"
        dcp_to_torch_save(str(checkpoint), str(full))
        blob = torch.load(full, weights_only=False, map_location="cpu")
    extra = json.loads((checkpoint / "extra.json").read_text())
    out = Path(out)
    with atomic_path(out) as tmp:
        torch.save({"model": blob["model"], "config": extra.get("config"), "step": extra.get("step"),
                    "recipe": extra.get("recipe")}, tmp)
    return out
