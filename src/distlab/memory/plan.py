"""Will the model fit? Verdicts and advice from the per-device memory arithmetic, and measured scaling.

The arithmetic itself (:mod:`distlab.memory.estimate`) lies below the doctor, shared with the run-time
out-of-memory report. It is a lower bound (no allocator fragmentation, no DDP bucket copies, no FSDP
all-gather buffers), so the fit test keeps a safety margin of the free memory.
Speedups are only ever *read* from a ``distlab bench scaling`` result; anything beyond the
measured GPU counts is labelled as an estimate, never presented as a measurement.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from distlab.config import PlacementKind
from distlab.errors import DistlabError
from distlab.memory.estimate import MemoryBreakdown, estimate_memory
from distlab.recipe import ModelSpec

__all__ = ["MemoryBreakdown", "ModelSpec", "estimate_memory", "find_scaling_file", "max_batch", "plan_devices",
           "plan_memory", "speedup_estimates"]

# Keep this share of free memory in reserve for the allocator, cuDNN workspaces, NCCL buffers.
SAFETY_FRACTION = 0.9
GIB = 1024**3


def max_batch(spec: ModelSpec, breakdown: MemoryBreakdown, usable_bytes: float) -> int:
    """Largest per-device batch whose activations still fit beside the static memory (0 if none)."""
    room = usable_bytes - breakdown.static
    if room <= 0:
        return 0
    if spec.activation_bytes_per_example == 0:
        return spec.batch_per_device
    return int(room // spec.activation_bytes_per_example)


def plan_memory(spec: ModelSpec, *, capacity_bytes: int, world_size: int, device: str) -> dict[str, Any]:
    """Compare DDP and FSDP against the smallest per-rank capacity and say what to do.

    ``capacity_bytes`` is the free memory of the tightest GPU (every DDP rank holds the same), or
    on CPU the host's available RAM divided by the number of processes sharing it.
    """
    usable = capacity_bytes * SAFETY_FRACTION
    ddp = estimate_memory(spec, strategy="ddp", world_size=world_size)
    fsdp = estimate_memory(spec, strategy="fsdp", world_size=world_size)
    verdict, advice = _recommend(spec, ddp, fsdp, usable, world_size)
    return {
        "model": asdict(spec),
        "device": device,
        "world_size": world_size,
        "capacity_bytes": int(capacity_bytes),
        "usable_bytes": int(usable),
        "ddp": ddp.to_dict(),
        "fsdp": fsdp.to_dict(),
        "verdict": verdict,
        "recommendation": advice,
        "largest": largest_term(ddp.to_dict()),
    }


# the setting that shrinks each term of a rank's memory most, in distlab's own keys
SHRINK_WITH = {
    "params": "dist.wrap=fsdp (each rank holds 1/N of the weights), or a smaller model",
    "grads": "dist.wrap=fsdp (gradients sharded like the weights)",
    "optimizer": "dist.wrap=fsdp, or optim.state_dtype=bf16 (AdamW moments in bf16, where the recipe has it), "
                 "or dist.cpu_offload=true",
    "activations": "dist.activation_checkpointing=blocks, or dist.grad_accum=2 (half the examples per pass)",
}


def largest_term(breakdown: dict[str, Any]) -> dict[str, Any]:
    """The biggest of a rank's four memory terms and the key that shrinks it: where a user should act first."""
    term = max(SHRINK_WITH, key=lambda k: breakdown.get(k, 0))
    return {"term": term, "bytes": int(breakdown.get(term, 0)), "shrink_with": SHRINK_WITH[term]}


def _recommend(spec: ModelSpec, ddp: MemoryBreakdown, fsdp: MemoryBreakdown, usable: float,
               world_size: int) -> tuple[str, str]:
    """One verdict key plus a sentence with the concrete number to change."""
    b = spec.batch_per_device
    if ddp.total <= usable:
        return "fits", f"fits with DDP: {_gib(ddp.total)} of {_gib(usable)} usable per rank"
    n = max_batch(spec, ddp, usable)
    if n >= 1:
        accum = math.ceil(b / n)
        return "reduce_batch", (f"reduce batch_per_device from {b} to {n} and use {accum} gradient-accumulation "
                                f"steps to keep the same global batch (DDP needs {_gib(ddp.total)}, "
                                f"{_gib(usable)} usable)")
    if world_size > 1 and fsdp.total <= usable:
        return "use_fsdp", (f"use FSDP: weights+grads+optimizer ({_gib(ddp.static)}) do not fit one device, "
                            f"sharded over {world_size} ranks they need {_gib(fsdp.total)} of {_gib(usable)}")
    n = max_batch(spec, fsdp, usable) if world_size > 1 else 0
    if n >= 1:
        accum = math.ceil(b / n)
        return "fsdp_reduce_batch", (f"use FSDP over {world_size} ranks with batch_per_device {n} and "
                                     f"{accum} gradient-accumulation steps")
    room = usable - spec.activation_bytes_per_example  # batch 1 per rank, the rest by accumulation
    if room <= 0:
        return "does_not_fit", (f"does not fit: one example's activations ({_gib(spec.activation_bytes_per_example)}) "
                                f"exceed the {_gib(usable)} usable; use activation checkpointing or shorter inputs")
    ranks = math.ceil(ddp.static / room)
    return "does_not_fit", (f"does not fit: weights+grads+optimizer are {_gib(ddp.static)}; FSDP needs at least "
                            f"{ranks} devices with {_gib(usable)} usable each (batch 1 per device plus gradient "
                            f"accumulation), or a smaller model")


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


# ---------------------------------------------------------------------------------------- scaling

DEFAULT_SCALING_DIR = Path("distributed_results")


def find_scaling_file(directory: Path = DEFAULT_SCALING_DIR) -> Path | None:
    """Newest ``distlab bench scaling`` result in ``directory`` (None when nothing was measured)."""
    files = sorted(directory.glob("*.json"), key=lambda p: p.stat().st_mtime) if directory.is_dir() else []
    return files[-1] if files else None


def speedup_estimates(scaling_file: Path | None, *, extrapolate_to: int = 8) -> dict[str, Any]:
    """Measured speedup/efficiency from a scaling file, plus clearly labelled Amdahl extrapolations.

    With no file there is no table: the result says nothing was measured rather than quoting
    folklore numbers.
    """
    if scaling_file is None:
        return {"source": None, "recipe": None, "device": None, "measured": [], "estimates": [],
                "note": "no scaling measurement found: run `distlab bench scaling` to measure speedups"}
    data, rows = _load_scaling(scaling_file)
    base = rows[0]
    measured = []
    for r in rows:
        speedup = r["throughput"] / base["throughput"]
        measured.append({"gpus": r["gpus"], "throughput": r["throughput"], "speedup": speedup,
                         "efficiency": speedup / (r["gpus"] / base["gpus"]), "kind": "measured"})
    serial = _amdahl_serial_fraction(measured, base["gpus"])
    estimates = []
    if serial is not None:
        n = measured[-1]["gpus"] * 2
        while n <= max(extrapolate_to, measured[-1]["gpus"]):
            rel = n / base["gpus"]
            speedup = rel / (1 + serial * (rel - 1))
            estimates.append({"gpus": n, "speedup": speedup, "efficiency": speedup / rel, "kind": "estimate"})
            n *= 2
    note = (f"speedups relative to {base['gpus']} GPU(s), measured; rows marked estimate are an Amdahl fit "
            f"(serial fraction {serial:.3f}), not measurements" if serial is not None
            else f"speedups relative to {base['gpus']} GPU(s), measured; too few points to extrapolate")
    return {"source": str(scaling_file), "recipe": data.get("recipe"), "device": data.get("device"),
            "measured": measured, "estimates": estimates, "serial_fraction": serial, "note": note}


def _load_scaling(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The file's object and its rows sorted by GPU count; schema errors name the file and the expected shape."""
    shape = 'expected {"recipe": ..., "device": ..., "results": [{"gpus": n, "throughput": x}, ...]}'
    if not path.is_file():
        raise DistlabError(f"scaling file {path} does not exist; run `distlab bench scaling` first")
    try:
        data = json.loads(path.read_text())
        rows = [{"gpus": int(r["gpus"]), "throughput": float(r["throughput"])} for r in data["results"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise DistlabError(f"scaling file {path} is malformed ({exc}); {shape}") from None
    rows = [r for r in rows if r["gpus"] >= 1 and r["throughput"] > 0]
    if not rows:
        raise DistlabError(f"scaling file {path} has no result with gpus >= 1 and throughput > 0; {shape}")
    return data, sorted(rows, key=lambda r: r["gpus"])


def _amdahl_serial_fraction(measured: list[dict[str, Any]], base_gpus: int) -> float | None:
    """Mean serial fraction implied by each multi-GPU point (Amdahl: S = n / (1 + s (n - 1)))."""
    fractions = []
    for m in measured:
        rel = m["gpus"] / base_gpus
        if rel > 1:
            fractions.append((rel / m["speedup"] - 1) / (rel - 1))
    if not fractions:
        return None
    return min(1.0, max(0.0, sum(fractions) / len(fractions)))


def plan_devices(specs: list[ModelSpec], gpu_free: dict[int, int], host_free: int, procs: int) -> dict[str, Any]:
    """Per-device totals for a placement of several models, against the free memory of each device.

    ``gpu_free`` maps a local GPU index (rank 0's device group) to its free bytes; GPUs missing from it
    (a laptop planning a cluster run) are estimated without a verdict. An ``offload`` model keeps its
    weights in CPU memory and needs one layer's weights on the compute device (counted as its
    activations there); a frozen model holds no gradients or optimizer state.
    """
    rows: dict[str, dict[str, int]] = {}
    for spec in specs:
        b = estimate_memory(spec, strategy="fsdp" if spec.wrap == "fsdp" else "ddp", world_size=procs)
        home, compute = spec.where.node_devices(bool(gpu_free) or spec.where.kind == PlacementKind.cuda)
        weights = rows.setdefault(home, {"params": 0, "grads": 0, "optimizer": 0, "activations": 0})
        weights["params"] += b.params
        weights["grads"] += b.grads
        weights["optimizer"] += b.optimizer
        rows.setdefault(compute, {"params": 0, "grads": 0, "optimizer": 0, "activations": 0})
        rows[compute]["activations"] += b.activations
    out, fits = [], True
    for dev, parts in sorted(rows.items()):
        total = sum(parts.values())
        if dev == "cpu":
            free = host_free // max(procs, 1)
        else:
            free = gpu_free.get(int(dev.split(":")[1]))
        ok = None if free is None else total <= free * SAFETY_FRACTION
        fits = fits and ok is not False
        models = [s.name for s in specs if dev in s.where.node_devices(dev != "cpu")]
        out.append({"device": dev, **parts, "total": total, "free_bytes": free, "fits": ok, "models": models})
    return {"per_device": out, "verdict": "fits" if fits else "does_not_fit",
            "models": [asdict(s) for s in specs]}

