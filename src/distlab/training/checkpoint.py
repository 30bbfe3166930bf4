"""Checkpoints on ``torch.distributed.checkpoint`` that survive crashes, preemption and resharding.

A checkpoint is written into a hidden temporary directory, sealed with a manifest of file sizes and
hashes, then renamed into place; a crash mid-write leaves the previous checkpoint untouched. The
newest is found by listing the step directories (no pointer file to fall out of date). On restore, a checkpoint whose files no longer match its manifest (truncated,
corrupted) is skipped with a warning and the one before it is used. Model and optimizer state go
through DCP's state-dict helpers, so a run saved on N ranks (DDP or FSDP2) loads on M ranks.
"""

from __future__ import annotations

import hashlib
import json
import errno
import logging
import os
import pickle
import random
import re
import shutil
import sys
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

# torch.distributed.checkpoint (with DTensor and sympy behind it) takes ~0.5 s to import; every command that loads a
# recipe imports this module, so DCP is imported where a checkpoint is written or read, not here.
if TYPE_CHECKING:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

from distlab.atomic import atomic_path, atomic_write_json
from distlab.errors import DistlabError
from distlab.runtime.dist import Runtime

log = logging.getLogger("distlab")
# A single process saving without a process group is intended here, not a mistake worth a warning.
warnings.filterwarnings("ignore", message="torch.distributed is disabled")
STEP_DIR = re.compile(r"^step(\d{8})$")
MANIFEST = "MANIFEST.json"
# The attribute a loader sets on a model whose frozen parameters it can rebuild (a LoRA model: its base's source
# and seed); Session.track_model reads it, so such a model's checkpoints hold only what trains.
FROZEN_BASE_ATTR = "distlab_frozen_base"


CHUNK = 64 << 20  # files are hashed in 64 MiB pieces, in parallel threads (hashlib releases the GIL)


def _chunk_digest(path: Path, offset: int) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        f.seek(offset)
        left = CHUNK
        while left > 0:
            block = f.read(min(1 << 22, left))
            if not block:
                break
            h.update(block)
            left -= len(block)
    return h.digest()


def _digests(directory: Path, files: list[Path], mode: str) -> list[str]:
    """One digest per file: the hash of its 64 MiB pieces' hashes, so one big shard hashes on every core."""
    if mode == "size" or not files:
        return [""] * len(files)
    jobs = [(i, p, off) for i, p in enumerate(files) for off in range(0, max(p.stat().st_size, 1), CHUNK)]
    with ThreadPoolExecutor(max_workers=min(8, len(jobs), (os.cpu_count() or 1) + 1)) as pool:
        pieces = list(pool.map(lambda job: _chunk_digest(job[1], job[2]), jobs))
    combined = [hashlib.blake2b(digest_size=16) for _ in files]
    for (i, _, _), piece in zip(jobs, pieces):
        combined[i].update(piece)
    return [h.hexdigest() for h in combined]


def _seal(directory: Path, mode: str) -> None:
    paths = [p for p in sorted(directory.rglob("*")) if p.is_file() and p.name != MANIFEST]
    files = {str(p.relative_to(directory)): {"size": p.stat().st_size, "hash": h}
             for p, h in zip(paths, _digests(directory, paths, mode))}
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
    hashed = [rel for rel, info in spec["files"].items() if info["hash"]]
    got = _digests(directory, [directory / rel for rel in hashed], spec.get("verify", "hash"))
    for rel, h in zip(hashed, got):
        if h != spec["files"][rel]["hash"]:
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


WRAPPER_PREFIXES = frozenset({"module", "_orig_mod", "_checkpoint_wrapped_module", "_fsdp_wrapped_module"})


def trainable_fqns(model: torch.nn.Module) -> set[str]:
    """The state-dict names of ``model``'s trainable parameters, without the DDP/compile/checkpoint wrappers' name
    parts (as DCP's state-dict helpers write them); every alias of a tied parameter is listed."""
    return {".".join(part for part in n.split(".") if part not in WRAPPER_PREFIXES)
            for n, p in model.named_parameters(remove_duplicate=False) if p.requires_grad}


class TrainState:
    """Everything a run must get back on resume, registered once by the recipe.

    Trainable models go through DCP's state-dict helpers together with their optimizers (so DDP and
    FSDP2 shards reshard on load); other replicated objects (EMA, sampler, schedules, counters) are
    saved into the same DCP checkpoint, where identical copies are written once and read back on any
    world size. Per-rank objects (a recurrent carry, environment states) and RNG streams go into one
    file per rank and come back only when the world size is unchanged, where rank r still owns the
    same slice of the data. Frozen models are never registered: they are rebuilt from their source. A model
    registered with ``frozen_base`` (a LoRA policy) is saved without its frozen parameters for the same reason:
    only what trains (the adapters) and its optimizer state go into the checkpoint, and restore reads them onto
    the base the run rebuilt, which must be the one ``frozen_base`` names.
    """

    def __init__(self) -> None:
        self.models: dict[str, tuple[torch.nn.Module, list[torch.optim.Optimizer]]] = {}
        self.frozen_bases: dict[str, str] = {}  # model name -> its frozen base, for models saved without it
        self.replicated: dict[str, Any] = {}
        self.per_rank: dict[str, Any] = {}
        self.optional: set[str] = set()  # replicated objects a checkpoint may lack (they then start fresh)
        self.counters: dict[str, Any] = {"step": 0}

    def add_model(self, name: str, model: torch.nn.Module, optimizers: list[torch.optim.Optimizer],
                  frozen_base: str | None = None) -> None:
        """``frozen_base``: where the model's frozen parameters come from (e.g. ``"tiny:llama-2l seed=3"``);
        given, checkpoints hold only its trainable parameters, and a restore over another base is refused."""
        self._check_new(name)
        self.models[name] = (model, list(optimizers))
        if frozen_base is not None:
            self.frozen_bases[name] = frozen_base

    def _options(self, name: str, load: bool = False) -> StateDictOptions | None:
        """Trainable parameters only for a model with a frozen base; ``strict=False`` on load, as the frozen
        keys are absent by design (DCP's load already fails on any trainable key the checkpoint lacks)."""
        if name not in self.frozen_bases:
            return None
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(ignore_frozen_params=True, strict=not load)

    def add(self, name: str, obj: Any, per_rank: bool = False, optional: bool = False) -> None:
        """``optional``: a checkpoint written without this object (e.g. the fp16 loss scaler, by a run that
        used another ``dist.precision``) still loads, and the object keeps its fresh state."""
        if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
            raise TypeError(f"{name}: tracked objects need state_dict() and load_state_dict()")
        self._check_new(name)
        (self.per_rank if per_rank else self.replicated)[name] = obj
        if optional:
            self.optional.add(name)

    def _check_new(self, name: str) -> None:
        if name in self.models or name in self.replicated or name in self.per_rank:
            raise ValueError(f"state '{name}' is registered twice")

    def dcp_state(self, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        state: dict[str, Any] = {"models": {}, "optim": {}, "objects": {}}
        for name, (model, opts) in self.models.items():
            state["models"][name], state["optim"][name] = get_state_dict(model, opts, options=self._options(name))
            if name in self.frozen_bases:  # DCP keeps a frozen tied alias (a tied LM head): drop it too
                keep = trainable_fqns(model)
                state["models"][name] = {k: v for k, v in state["models"][name].items() if k in keep}
        for name, obj in self.replicated.items():
            if name not in skip:
                state["objects"][name] = obj.state_dict()
        return state

    def load_dcp_state(self, state: dict[str, Any], skip: frozenset[str] = frozenset()) -> None:
        from torch.distributed.checkpoint.state_dict import set_state_dict

        for name, (model, opts) in self.models.items():
            set_state_dict(model, opts, model_state_dict=state["models"][name],
                           optim_state_dict=state["optim"][name], options=self._options(name, load=True))
        for name, obj in self.replicated.items():
            if name not in skip:
                obj.load_state_dict(state["objects"][name])

    def rank_state(self) -> dict[str, Any]:
        return {name: obj.state_dict() for name, obj in self.per_rank.items()}

    def load_rank_state(self, state: dict[str, Any]) -> None:
        for name, obj in self.per_rank.items():
            if name in state:
                obj.load_state_dict(state[name])


class Box:
    """A plain value (an ACT carry, a generator state) made trackable; the recipe keeps ``value`` current.

    The value is stored as one pickled leaf: DCP loads into a template of the same structure, and the
    structure of an arbitrary value (None before a resume, a nested dict after) is not known in advance.
    """

    def __init__(self, value: Any = None) -> None:
        self.value = value

    def state_dict(self) -> dict[str, Any]:
        return {"value": pickle.dumps(self.value)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raw = state["value"]
        self.value = pickle.loads(raw) if isinstance(raw, bytes) else raw


def find_checkpoint(target: Path, verify_given: bool = False, skipped: list[str] | None = None) -> Path:
    """A checkpoint directory as given, or the newest valid one under a run directory.

    A run directory's checkpoints are verified to choose one; ``verify_given`` verifies a given
    checkpoint directory too, so the result is verified either way (``distlab eval``: the ranks that
    load it afterwards do not hash it again, which would read the whole checkpoint once per rank).
    Every way this can fail says which of the cases it is (no such path, not a run, nothing saved yet,
    everything saved is corrupt, the given one is corrupt), because the fix differs for each. ``skipped``
    receives ``"stepNNNNNNNN (why)"`` for each newer checkpoint passed over as corrupt, for the caller to say.
    """
    target = Path(target)
    if not target.exists():
        raise DistlabError(f"{target} does not exist; pass a run directory (runs/<name>) or a checkpoint directory")
    if not target.is_dir():
        raise DistlabError(f"{target} is a file, not a run; pass a run directory (runs/<name>) or a checkpoint "
                           f"directory (runs/<name>/checkpoints/stepNNNNNNNN)")
    if STEP_DIR.match(target.name):
        problem = verify_checkpoint(target) if verify_given else None
        if problem:
            raise DistlabError(f"checkpoint {target} cannot be trusted: {problem}; pick another step or retrain")
        return target
    root = target / "checkpoints" if (target / "checkpoints").is_dir() else target
    steps = sorted((p for p in root.iterdir() if p.is_dir() and STEP_DIR.match(p.name)), reverse=True)
    problems: list[tuple[str, str]] = []
    for s in steps:
        problem = verify_checkpoint(s)
        if problem is None:
            if skipped is not None:
                skipped += [f"{name} ({why})" for name, why in problems]
            return s
        problems.append((s.name, problem))
    if problems:
        listed = "; ".join(f"{name}: {why}" for name, why in problems)
        raise DistlabError(f"every checkpoint under {root} is corrupt ({listed}); nothing can be "
                           f"loaded, retrain (distlab train ... run.resume=fresh)")
    if not (target / "checkpoints").is_dir() and not (target / "config.yaml").exists():
        raise DistlabError(f"{target} is not a distlab run (no checkpoints/ or config.yaml); pass runs/<name>")
    raise DistlabError(f"no checkpoint under {root} yet; train first (distlab train ...)")


def say_skipped(skipped: list[str], used: Path, doing: str) -> None:
    """Name, on stderr in one line, the newer checkpoints :func:`find_checkpoint` passed over as corrupt and the
    one used instead (``doing`` it: "exporting", "evaluating"): a fallback nobody hears of ships or scores an older
    model than the user meant, and a log that says "resumed from" does not tell them."""
    if skipped:
        print(f"skipped corrupt checkpoint {'; '.join(skipped)}: {doing} {used.name}, the newest good one",
              file=sys.stderr)


def _no_space(exc: OSError, what: Path) -> DistlabError | None:
    """A one-line error for a full disk (or quota), which needs the user, not a retry."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DistlabError(f"no space left on device while writing {what}; free space or point run.dir at a "
                            f"larger disk, then rerun the same command to resume from the last checkpoint")
    return None


def _os_errors(exc: BaseException) -> list[OSError]:
    """The OSErrors behind a DCP failure: DCP collects each rank's writer error in ``failures`` of a
    ``CheckpointException`` (a BaseException, not an Exception) rather than chaining it."""
    found, todo, seen = [], [exc], set()
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError):
            found.append(e)
        todo += [e.__cause__, e.__context__]
        todo += [w[0] if isinstance(w, tuple) else w for w in getattr(e, "failures", {}).values()]
    return found


def _save_failed(exc: BaseException, tmp: Path) -> BaseException:
    """Remove the failed save's temporary directory (so it never eats the space the next attempt needs)
    and turn a full disk, however deep DCP buried it, into the one-line error; other errors pass through."""
    nearly_full = _free_bytes(tmp.parent) < NEARLY_FULL  # read before the removal frees the failed save's space
    shutil.rmtree(tmp, ignore_errors=True)
    full = next((e for e in _os_errors(exc) if _no_space(e, tmp)), None)
    if full is not None:
        return _no_space(full, tmp)
    if nearly_full:  # torch.save's zip writer reports a short write as "unexpected pos N vs M", without errno
        return _no_space(OSError(errno.ENOSPC, "no space"), tmp)
    return exc


NEARLY_FULL = 1 << 20  # bytes free below which a failed write is taken for a full disk


def _free_bytes(path: Path) -> int:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return NEARLY_FULL  # unknown: do not guess a full disk


class CheckpointManager:
    """Save/restore a :class:`TrainState` plus per-rank RNG and a JSON ``meta`` (recipe, config)."""

    def __init__(self, root: Path, rt: Runtime, keep_last: int = 3, async_save: bool = False,
                 verify: str = "hash", create: bool = True) -> None:
        if keep_last < 1:
            raise DistlabError(f"ckpt.keep_last={keep_last} would delete every checkpoint; use 1 or more")
        if verify not in ("hash", "size"):
            raise DistlabError(f"ckpt.verify={verify!r} is not one of hash, size")
        self.root, self.rt, self.keep_last, self.async_save, self.verify = Path(root), rt, keep_last, async_save, verify
        self.create = create
        self._pending: tuple[Any, Path, Path] | None = None
        if rt.is_main and create:
            self.root.mkdir(parents=True, exist_ok=True)
            self.clean_stale()

    def clean_stale(self) -> list[Path]:
        """Remove temporary checkpoints left by a save that crashed or ran out of disk (never a sealed one)."""
        stale = [p for p in self.root.glob(".tmp-step*") if p.is_dir()]
        for p in stale:
            log.warning("removing unfinished checkpoint %s (a previous save was interrupted)", p.name)
            shutil.rmtree(p, ignore_errors=True)
        return stale

    def problem(self, directory: Path) -> str | None:
        return verify_checkpoint(directory)

    def discard_all(self) -> Path:
        """Move every checkpoint aside (``run.resume=fresh``): the run starts over, nothing is deleted."""
        import time

        aside = self.root.parent / f"checkpoints.discarded-{time.strftime('%Y%m%d-%H%M%S')}"
        aside.mkdir(parents=True, exist_ok=True)
        for d in self.steps():
            os.replace(d, aside / d.name)
        return aside

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
    def save(self, step: int, state: TrainState, meta: dict | None = None) -> None:
        """Collective: every rank calls it at the same step.

        A save that fails (a full disk above all) removes its temporary directory, so it never eats
        the space the next attempt needs, and a full disk is reported as such in one line.
        """
        from torch.distributed.checkpoint.api import CheckpointException

        self.wait()
        tmp = self.root / f".tmp-step{step:08d}"
        try:
            self._save(step, state, meta)
        except (Exception, CheckpointException) as exc:
            err = _save_failed(exc, tmp)
            if err is exc:
                raise
            raise err from None

    def _save(self, step: int, state: TrainState, meta: dict | None) -> None:
        import torch.distributed.checkpoint as dcp

        final = self.root / f"step{step:08d}"
        tmp = self.root / f".tmp-step{step:08d}"
        if self.rt.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
            (tmp / "rng").mkdir(parents=True)
        self.rt.barrier("checkpoint start")
        state.counters["step"] = step
        torch.save({"rng": _rng_state(), "state": state.rank_state()}, tmp / "rng" / f"rank{self.rt.rank}.pt")
        if self.rt.is_main:
            info = dict(meta or {}, **state.counters, world_size=self.rt.world_size,
                        models=sorted(state.models), objects=sorted(state.replicated),
                        frozen_bases=dict(sorted(state.frozen_bases.items())),
                        per_rank=sorted(state.per_rank))
            atomic_write_json(tmp / "extra.json", info)
        dcp_state = state.dcp_state()
        if self.async_save:
            fut = dcp.async_save(dcp_state, checkpoint_id=str(tmp), process_group=self.rt.cpu_group)
            self._pending = (fut, tmp, final)
        else:
            dcp.save(dcp_state, checkpoint_id=str(tmp), process_group=self.rt.group)
            self._finalize(tmp, final)

    def wait(self) -> None:
        """Finish an async save (seal, rename, prune); a no-op when none is in flight."""
        if self._pending is None:
            return
        from torch.distributed.checkpoint.api import CheckpointException

        fut, tmp, final = self._pending
        self._pending = None
        try:
            fut.result()
        except (Exception, CheckpointException) as exc:
            err = _save_failed(exc, tmp)
            if err is exc:
                raise
            raise err from None
        self._finalize(tmp, final)

    def _finalize(self, tmp: Path, final: Path) -> None:
        self.rt.barrier("checkpoint written")
        if self.rt.is_main:
            _seal(tmp, self.verify)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            for old in self.steps()[:-self.keep_last]:
                shutil.rmtree(old, ignore_errors=True)
            log.info("saved checkpoint %s", final)
        self.rt.barrier("checkpoint sealed")

    # -- restore -----------------------------------------------------------------------------
    def restore(self, state: TrainState, path: Path | None = None) -> dict | None:
        """Load the newest valid checkpoint (or ``path``) into ``state``; return its meta, or None if none.

        A given ``path`` is loaded as it is: it comes from :func:`find_checkpoint`, which verified it
        once before any rank started (every rank hashing it again would read the checkpoint N more times).
        """
        choice = str(path) if path else None
        if choice is None and self.rt.is_main:
            found = self.latest_valid()
            choice = str(found) if found else None
        choice = self.rt.broadcast_object(choice)
        if choice is None:
            return None
        ckpt = Path(choice)
        meta = json.loads((ckpt / "extra.json").read_text())
        missing = [n for n in state.models if n not in meta.get("models", state.models)]
        if missing:
            raise DistlabError(f"checkpoint {ckpt} holds no model {missing[0]!r} (it has {meta.get('models')}); "
                               f"was it written by another recipe or config?")
        _check_frozen_bases(ckpt, meta.get("frozen_bases", {}), state.frozen_bases)
        absent = frozenset(n for n in state.optional if n in state.replicated and n not in meta.get("objects", ()))
        if absent:
            log.warning("checkpoint %s holds no %s (written without it): starting it fresh", ckpt.name,
                        ", ".join(sorted(absent)))
        import torch.distributed.checkpoint as dcp

        dcp_state = state.dcp_state(skip=absent)
        dcp.load(dcp_state, checkpoint_id=str(ckpt), process_group=self.rt.group)
        state.load_dcp_state(dcp_state, skip=absent)
        state.counters.update({k: meta[k] for k in state.counters if k in meta})
        rng_file = ckpt / "rng" / f"rank{self.rt.rank}.pt"
        if meta.get("world_size") == self.rt.world_size and rng_file.exists():
            saved = torch.load(rng_file, weights_only=False, map_location="cpu")
            _set_rng_state(saved["rng"])
            state.load_rank_state(saved["state"] or {})
            meta["per_rank_restored"] = True
        else:  # new world size: per-rank streams cannot be mapped, so derive fresh ones deterministically
            seed = (int(meta.get("step", 0)) * 1_000_003 + self.rt.rank) % 2**31
            random.seed(seed), np.random.seed(seed), torch.manual_seed(seed)
            meta["per_rank_restored"] = False
            if state.per_rank:
                log.warning("world size changed (%s -> %d): per-rank state %s starts fresh",
                            meta.get("world_size"), self.rt.world_size, sorted(state.per_rank))
        # an evaluation (which never creates the checkpoint folder) loads; only training resumes
        log.info("%s %s (step %s)", "resumed from" if self.create else "loaded", ckpt, meta.get("step"))
        return meta


def _check_frozen_bases(ckpt: Path, saved: dict[str, str], now: dict[str, str]) -> None:
    """A checkpoint without a model's frozen weights only means something over the base it trained on: refuse in
    one line a restore over another base, or into a model that trains every weight (the frozen keys are missing).
    A full checkpoint may still be read into a model with a frozen base (only its trainable keys are read)."""
    for name, base in saved.items():
        if name not in now:
            raise DistlabError(f"checkpoint {ckpt} holds only the trainable (LoRA adapter) weights of {name!r}, "
                               f"over base {base!r}, but this run trains every weight of it; resume with the run's "
                               f"model.lora_r")
        if now[name] != base:
            raise DistlabError(f"checkpoint {ckpt} holds {name!r}'s LoRA adapters trained over base {base!r}, but "
                               f"this run built {now[name]!r}; resume with the run's model.source and run.seed")


def load_model_weights(model: torch.nn.Module, ckpt: Path, prefer: str | None = None) -> str:
    """Read one model's weights from a checkpoint into ``model``, on one process without a process group.

    For tools that use a trained model outside a run (a backtest, a demo): no optimizer, no other
    state, no verification (the caller's :func:`find_checkpoint` did that). The model read is
    ``prefer`` when the checkpoint has it, else the first one it lists; checkpoints from before
    several models per run hold a single ``model`` and load too. Returns the name read.
    """
    import torch.distributed.checkpoint as dcp

    names = json.loads((Path(ckpt) / "extra.json").read_text()).get("models")
    if not names:
        state = {"model": model.state_dict()}
        dcp.load(state, checkpoint_id=str(ckpt))
        model.load_state_dict(state["model"])
        return "model"
    name = prefer if prefer in names else names[0]
    base = json.loads((Path(ckpt) / "extra.json").read_text()).get("frozen_bases", {}).get(name)
    weights = model.state_dict()
    if base is not None:  # adapters only: the frozen weights are the caller's freshly built base
        trainable = {n for n, p in model.named_parameters() if p.requires_grad}
        if not trainable:
            raise DistlabError(f"checkpoint {ckpt} holds only the LoRA adapters of {name!r} (over base {base!r}); "
                               f"build the model with the run's model.lora_r to read them")
        weights = {k: v for k, v in weights.items() if k in trainable}
    state = {"models": {name: weights}}
    dcp.load(state, checkpoint_id=str(ckpt))
    model.load_state_dict(state["models"][name], strict=base is None)
    return name


def export_model(checkpoint: Path, out: Path, verified: bool = False) -> Path:
    """Consolidate a (possibly sharded) DCP checkpoint's model weights into one ``torch.save`` file.

    The checkpoint is verified first unless the caller did (``verified``: ``distlab export`` checks it as it
    chooses it, so it is hashed once).
    """
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    problem = None if verified else verify_checkpoint(checkpoint)
    if problem:
        raise DistlabError(f"cannot export {checkpoint}: {problem}")
    with tempfile.TemporaryDirectory() as td:
        full = Path(td) / "full.pt"
        dcp_to_torch_save(str(checkpoint), str(full))
        blob = torch.load(full, weights_only=False, map_location="cpu")
    extra = json.loads((checkpoint / "extra.json").read_text())
    models = blob.get("models") or {"model": blob["model"]}
    primary = "model" if "model" in models else sorted(models)[0]
    out = Path(out)
    with atomic_path(out) as tmp:
        torch.save({"model": models[primary], "models": models, "config": extra.get("config"),
                    "step": extra.get("step"), "recipe": extra.get("recipe")}, tmp)
    return out
