"""A short all-reduce bandwidth test in real processes that can never hang the doctor.

Each rank is a fresh Python process (the parent creates no CUDA context and no process group); the
group gets a timeout for its collectives and the parent joins against a wall-clock deadline,
killing stragglers, so a broken fabric shows up as a 'timeout' finding instead of a frozen shell.
Bandwidths follow the nccl-tests convention: algbw = bytes / time, busbw = algbw * 2(n-1)/n.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

MIB = 1024**2
DEFAULT_SIZES_MIB = (1, 16, 64)
WARMUP_ITERS = 3
ITERS = {"nccl": 20, "gloo": 5}  # GPU all-reduces take microseconds: more of them for a stable mean


def sizes_up_to(max_mib: int) -> list[int]:
    """Message sizes in bytes: the standard 1/16/64 MiB ladder cut at ``max_mib`` (which is always included)."""
    sizes = [s for s in DEFAULT_SIZES_MIB if s < max_mib] + [max_mib]
    return [s * MIB for s in sizes]


def bus_bandwidth(algbw: float, world_size: int) -> float:
    """Per-link traffic of a ring all-reduce: each rank sends and receives 2(n-1)/n of the buffer."""
    return algbw * 2 * (world_size - 1) / world_size


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_entry(spec_json: str) -> None:
    """Child process body: one rank; rank 0 prints its rows as the last stdout line (JSON)."""
    import torch
    import torch.distributed as dist

    spec = json.loads(spec_json)
    rank, world_size, backend = spec["rank"], spec["world_size"], spec["backend"]
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{spec['port']}", rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=spec["timeout_s"]))
    rows = [_time_size(dist, torch, device, size, spec["iters"], rank, world_size) for size in spec["sizes"]]
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(rows), flush=True)


def _time_size(dist: Any, torch: Any, device: Any, size: int, iters: int, rank: int,
               world_size: int) -> dict[str, Any]:
    numel = size // 4
    buf = torch.full((numel,), float(rank + 1), dtype=torch.float32, device=device)
    dist.all_reduce(buf)  # proves the reduction is correct
    expected = world_size * (world_size + 1) / 2
    correct = bool(torch.all(buf == expected).item())
    buf.fill_(1.0 / world_size)  # sum then divide keeps it at 1/n..1: repeated sums cannot overflow
    for _ in range(WARMUP_ITERS):  # NCCL connects lazily per size/algorithm: keep that out of the timing
        dist.all_reduce(buf)
        buf.div_(world_size)
    _sync(torch, device)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
        buf.div_(world_size)
    _sync(torch, device)
    elapsed = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
    seconds = float(elapsed.item())
    algbw = size / seconds / 1e9
    return {"size_bytes": size, "seconds": seconds, "algbw_gbps": algbw,
            "busbw_gbps": bus_bandwidth(algbw, world_size), "correct": correct}


def _sync(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def child_env(**overrides: str) -> dict[str, str]:
    """Environment for doctor subprocesses: they import distlab from wherever this process did."""
    env = dict(os.environ, **overrides)
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    return env


def run_allreduce(backend: str, world_size: int, sizes: list[int], *, iters: int | None = None,
                  timeout_s: float = 60.0) -> dict[str, Any]:
    """Start ``world_size`` rank processes; status is 'ok', 'timeout' or 'failed', with per-size rows.

    ``timeout_s`` bounds both the process group's collectives and the whole run (start-up
    included): past it every rank is killed.
    """
    iters = iters or ITERS.get(backend, 5)
    report: dict[str, Any] = {"backend": backend, "world_size": world_size,
                              "device": "cuda" if backend == "nccl" else "cpu", "iters": iters,
                              "timeout_s": timeout_s, "status": "failed", "detail": "", "results": []}
    # One thread per rank: this is a communication test, extra threads only fight over the cores.
    port, env = _free_port(), child_env(OMP_NUM_THREADS="1")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="distlab-doctor-") as tmp:
        procs = [_start_rank(rank, world_size, backend, port, sizes, iters, timeout_s, env, Path(tmp))
                 for rank in range(world_size)]
        outputs = _collect(procs, start + timeout_s)
    report["wall_s"] = time.monotonic() - start
    if outputs is None:
        report["status"], report["detail"] = "timeout", (f"no result within {timeout_s:g}s: a rank is stuck in "
                                                         "rendezvous or a collective; all ranks were killed")
        return report
    failed = [(r, out) for r, out in enumerate(outputs) if out[0] not in (None, 0)]
    if failed:
        rank, (code, _, err) = failed[0]
        report["detail"] = f"rank {rank} exited with code {code}: {_last_line(err)}"
        return report
    rows = json.loads(outputs[0][1].strip().splitlines()[-1])
    report["results"] = rows
    if all(row["correct"] for row in rows):
        report["status"] = "ok"
    else:
        report["detail"] = "all-reduce returned a wrong sum"
    return report


_CHILD_CODE = "import sys; from distlab.doctor.bandwidth import rank_entry; rank_entry(sys.argv[1])"


def _start_rank(rank: int, world_size: int, backend: str, port: int, sizes: list[int], iters: int,
                timeout_s: float, env: dict[str, str], tmp: Path) -> tuple[subprocess.Popen, Path, Path]:
    """Output goes to files, not pipes: a chatty rank (NCCL_DEBUG=INFO) can never block on a full pipe."""
    spec = json.dumps({"rank": rank, "world_size": world_size, "backend": backend, "port": port,
                       "sizes": sizes, "iters": iters, "timeout_s": timeout_s})
    out, err = tmp / f"rank{rank}.out", tmp / f"rank{rank}.err"
    with out.open("w") as fo, err.open("w") as fe:
        proc = subprocess.Popen([sys.executable, "-c", _CHILD_CODE, spec], env=env, stdout=fo, stderr=fe)
    return proc, out, err


def _collect(ranks: list[tuple[subprocess.Popen, Path, Path]],
             deadline: float) -> list[tuple[int | None, str, str]] | None:
    """(exit code, stdout, stderr) per rank once all exit or one fails (code None: killed then);
    None if the deadline passed.

    Every rank still running when this returns is killed, so nothing outlives the doctor.
    """
    procs = [p for p, _, _ in ranks]
    try:
        while True:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes) or any(c not in (None, 0) for c in codes):
                break
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    return [(c, out.read_text(), err.read_text()) for (_, out, err), c in zip(ranks, codes)]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"
