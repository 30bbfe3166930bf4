"""Step profiling with ``torch.profiler``: where a training step spends its time, measured, not guessed.

``log.profile_steps=N`` records N steps after ``log.profile_wait`` steps (compilation and warm-up
excluded) on rank 0 and writes ``<run>/profile/``: ``summary.json`` (wall time per step, time per
phase a recipe marked with :func:`phase`, device kernel time by kind of kernel, and the share of the
wall time the device was busy, whose complement is launch gaps and host work), ``top_ops.txt`` and a
Chrome/Perfetto ``trace.json.gz``. With the option off, :func:`phase` is a named no-op range.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch

from distlab.atomic import atomic_write_json, atomic_write_text

# (kind, pattern over kernel names), first match wins; the rest counts as "other"
KERNEL_KINDS: list[tuple[str, re.Pattern]] = [
    ("communication (nccl)", re.compile(r"nccl", re.I)),  # first: NCCL's kernel names contain "reduce" and "copy"
    ("fused elementwise (triton)", re.compile(r"^triton_", re.I)),  # Inductor's names; before "copy" ("_to_copy")
    ("attention", re.compile(r"flash|fmha|attention|sdpa", re.I)),
    ("matmul", re.compile(r"gemm|nvjet|cutlass|cublas|xmma|wgmma", re.I)),  # nvjet: cuBLAS's Hopper kernels
    ("optimizer", re.compile(r"adam|multi_tensor|atan2", re.I)),
    ("copy", re.compile(r"^memcpy|^memset|copy_kernel|CatArrayBatchedCopy", re.I)),
    ("reduction", re.compile(r"reduce|norm_kernel", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|pointwise", re.I)),
]


# runtime calls in which the host waits for the device: each one empties the queue of launched work, so the
# host cannot prepare the next kernels while the device runs (the per-step fixed cost of a step that syncs)
HOST_WAITS = re.compile(r"^cuda(Stream|Device|Event)Synchronize$|^cudaMemcpy$|^cudaStreamWaitValue", re.I)


def phase(name: str) -> AbstractContextManager:
    """A named range (``forward``, ``backward``, ``optimizer``...) that the profile summary totals."""
    return torch.profiler.record_function(f"phase:{name}")


_PHASE_SYNC: torch.device | None = None  # set by the session from log.sync_phases


def sync_phases(device: torch.device | None) -> None:
    """Make :func:`phase_time` wait for ``device`` (a CUDA device) at every read, or stop waiting (``None``)."""
    global _PHASE_SYNC
    _PHASE_SYNC = device if device is not None and device.type == "cuda" else None


def phase_time() -> float:
    """The clock a recipe's phase timers (``generate_s``, ``update_s``...) read. Without ``log.sync_phases`` the
    host runs ahead of the device, so a phase's queued kernels are charged to the next one and only a step's total
    is exact; with it every read waits for the device, which gives each phase its own kernels (a comparison of
    phases against another framework needs that) and costs the overlap of host and device at the edges."""
    if _PHASE_SYNC is not None:
        torch.cuda.synchronize(_PHASE_SYNC)
    return time.perf_counter()


def kernel_kind(name: str) -> str:
    return next((kind for kind, pat in KERNEL_KINDS if pat.search(name)), "other")


class StepProfiler:
    """Call :meth:`step` once per training step; it starts, stops and writes the profile by itself."""

    def __init__(self, out_dir: Path, steps: int, wait: int, device: torch.device, enabled: bool) -> None:
        self.out_dir, self.steps, self.wait, self.device = Path(out_dir), steps, wait, device
        self.enabled = enabled and steps > 0
        self._seen = 0
        self._prof: torch.profiler.profile | None = None
        self._t0 = 0.0

    def step(self) -> None:
        if not self.enabled:
            return
        self._seen += 1  # steps wait+1 .. wait+steps are recorded: start after step ``wait`` has ended
        if self._seen == self.wait:
            self._start()
        elif self._prof is not None and self._seen == self.wait + self.steps:
            self._finish()

    def close(self) -> None:
        """End a recording the run stopped in the middle of (fewer steps than asked are still written)."""
        if self._prof is not None:
            self._finish()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _start(self) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._sync()
        self._prof = torch.profiler.profile(activities=activities, record_shapes=False)
        self._prof.__enter__()
        self._t0, self._start_seen = time.perf_counter(), self._seen

    def _finish(self) -> None:
        self._sync()
        wall = time.perf_counter() - self._t0
        prof, self._prof = self._prof, None
        prof.__exit__(None, None, None)
        self.enabled = False
        recorded = max(self._seen - self._start_seen, 1)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        summary = summarize(prof, wall, recorded, self.device)
        atomic_write_json(self.out_dir / "summary.json", summary)
        sort = "self_cuda_time_total" if self.device.type == "cuda" else "self_cpu_time_total"
        atomic_write_text(self.out_dir / "top_ops.txt", prof.key_averages().table(sort_by=sort, row_limit=40))
        raw = self.out_dir / ".trace.json"
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as src, gzip.open(self.out_dir / "trace.json.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()


def summarize(prof: Any, wall_s: float, steps: int, device: torch.device) -> dict[str, Any]:
    """Per-step milliseconds: wall, each marked phase (host-side span), device kernels by kind."""
    phases: dict[str, float] = {}
    kernels: dict[str, float] = {}
    kernel_total = 0.0
    waits, wait_ms = 0, 0.0
    for evt in prof.events():
        name = evt.name
        if evt.device_type == torch.autograd.DeviceType.CPU and HOST_WAITS.search(name):
            waits += 1
            wait_ms += evt.cpu_time_total / 1e3
        elif name.startswith("phase:") and evt.device_type == torch.autograd.DeviceType.CPU:
            key = name.removeprefix("phase:")
            phases[key] = phases.get(key, 0.0) + evt.cpu_time_total / 1e3
        elif evt.device_type == torch.autograd.DeviceType.CUDA and not _annotation(evt):
            ms = evt.device_time_total / 1e3 if hasattr(evt, "device_time_total") else evt.cuda_time_total / 1e3
            kind = kernel_kind(name)
            kernels[kind] = kernels.get(kind, 0.0) + ms
            kernel_total += ms
    per = 1.0 / steps
    wall_ms = wall_s * 1e3 * per
    out: dict[str, Any] = {"steps": steps, "device": str(device), "wall_ms_per_step": wall_ms,
                           "phases_ms_per_step": {k: v * per for k, v in sorted(phases.items())}}
    if device.type == "cuda":
        out["kernel_ms_per_step"] = {k: v * per for k, v in sorted(kernels.items(), key=lambda kv: -kv[1])}
        out["device_busy_fraction"] = min(kernel_total * per / wall_ms, 1.0) if wall_ms else 0.0
        out["host_waits_per_step"] = waits * per
        out["host_wait_ms_per_step"] = wait_ms * per
    return out


def _annotation(evt: Any) -> bool:
    """A named range drawn on the device's timeline (a phase, a compiled region), not a kernel: it spans kernels
    that are counted on their own, so counting it too made a host-bound step look 100% busy."""
    return bool(getattr(evt, "is_user_annotation", False)) or evt.name.startswith(("phase:", "Torch-Compiled Region",
                                                                                  "## ", "CompiledFunction"))


def read_summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / "profile" / "summary.json").read_text())
