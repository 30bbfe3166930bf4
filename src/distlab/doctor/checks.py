"""What the doctor looks at: versions, host, GPUs, topology, and the misconfigurations that bite.

Every check is a plain function of its inputs (an environment mapping, counts, sizes) so the
tests can feed it a broken setup without having one. GPUs are probed in a child process:
the parent never creates a CUDA context, so the memory it reports and the bandwidth ranks it
starts later see the devices as a training job would.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

import distlab
from distlab.doctor.bandwidth import child_env

GIB = 1024**3
SHM_MIN_BYTES = 1 * GIB
LOW_FREE_FRACTION = 0.75
DEFAULT_MASTER_PORT = 29500
SEVERITIES = ("error", "warn", "info")


@dataclass(frozen=True)
class Finding:
    """One observation; ``fix`` is the concrete action (empty for purely informative notes)."""

    severity: str
    code: str
    message: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


# --------------------------------------------------------------------------------- collection

def _run(cmd: list[str], timeout: float = 10.0) -> str | None:
    """stdout of a helper tool, or None when it is missing, fails or hangs (a wedged driver can)."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def driver_version() -> str | None:
    """From nvidia-smi, else pynvml; None on machines without the NVIDIA driver."""
    out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    if out and out.strip():
        return out.strip().splitlines()[0].strip()
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # pynvml missing or no driver: both simply mean "unknown"
        return None


def collect_versions() -> dict[str, Any]:
    """Software stack; every value is a string, a bool or None (unknown / not built in)."""
    dist = torch.distributed
    nccl = None
    if torch.cuda.is_available() and hasattr(torch.cuda, "nccl"):
        try:
            nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:  # NCCL not linked into this build
            nccl = None
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "cuda_runtime": torch.version.cuda,
        "hip_runtime": getattr(torch.version, "hip", None),
        "cudnn": str(cudnn) if cudnn else None,
        "nccl": nccl,
        "driver": driver_version(),
        "gloo_available": bool(dist.is_available() and dist.is_gloo_available()),
        "nccl_available": bool(dist.is_available() and dist.is_nccl_available()),
        "distlab": distlab.__version__,
    }


def shm_bytes(path: str = "/dev/shm") -> int | None:
    """Size of the shared-memory mount NCCL and DataLoader workers use (None where there is none)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def infiniband_devices() -> list[str]:
    root = Path("/sys/class/infiniband")
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def cpu_count() -> int:
    """Cores this process may use (affinity/cgroup-pinned jobs see fewer than os.cpu_count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def collect_host() -> dict[str, Any]:
    from distlab.memory.host import available_bytes, meminfo

    mem = meminfo()
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_count": cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "ram_total_bytes": mem.get("MemTotal"),
        "ram_available_bytes": available_bytes(),  # MemAvailable, or less under a cgroup limit
        "shm_bytes": shm_bytes(),
        "infiniband": infiniband_devices(),
    }


def physical_gpu_count() -> int | None:
    """NVIDIA GPUs on the host regardless of CUDA_VISIBLE_DEVICES; None when it cannot be told."""
    proc = Path("/proc/driver/nvidia/gpus")
    if proc.is_dir():
        return sum(1 for _ in proc.iterdir())
    out = _run(["nvidia-smi", "-L"])
    if out is None:
        return None
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def _probe_devices() -> dict[str, Any]:
    """Runs in the child: properties, free memory and peer access of every visible GPU."""
    import torch as t

    gpus = []
    n = t.cuda.device_count()
    for i in range(n):
        p = t.cuda.get_device_properties(i)
        free, total = t.cuda.mem_get_info(i)
        ampere = (p.major, p.minor) >= (8, 0)
        gpus.append({"index": i, "name": p.name, "capability": f"{p.major}.{p.minor}",
                     "total_bytes": int(total), "free_bytes": int(free),
                     "sm_count": p.multi_processor_count, "bf16": ampere, "tf32": ampere,
                     "uuid": str(getattr(p, "uuid", "")) or None})
    p2p = [[i == j or bool(t.cuda.can_device_access_peer(i, j)) for j in range(n)] for i in range(n)]
    return {"gpus": gpus, "p2p": p2p}


_PROBE_CODE = "import json; from distlab.doctor.checks import _probe_devices; print(json.dumps(_probe_devices()))"


def probe_gpus(timeout_s: float = 60.0) -> dict[str, Any]:
    """GPU facts gathered in a child process; {'gpus': [], 'p2p': [], 'error': ...} on failure."""
    if not torch.cuda.is_available():
        return {"gpus": [], "p2p": [], "error": None}
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE_CODE], capture_output=True, text=True,
                             env=child_env(), timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"gpus": [], "p2p": [], "error": f"GPU probe did not finish within {timeout_s:g}s"}
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"gpus": [], "p2p": [], "error": f"GPU probe exited with code {out.returncode}: {tail}"}
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "error": None}


def nvidia_topology() -> dict[str, Any]:
    """`nvidia-smi topo -m` text and whether any link in it is NVLink (NV#)."""
    text = _run(["nvidia-smi", "topo", "-m"])
    if text is None:
        return {"nvidia_smi_topo": None, "nvlink": None}
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # nvidia-smi underlines the header with ANSI codes
    nvlink = any(tok.startswith("NV") and tok[2:].isdigit() for tok in text.split())
    return {"nvidia_smi_topo": text.rstrip(), "nvlink": nvlink}


# ----------------------------------------------------------------------------------- checks

def _parse_visible(value: str) -> list[str]:
    return [tok.strip() for tok in value.split(",") if tok.strip()]


def check_cuda_visible_devices(env: Mapping[str, str], visible: int, physical: int | None) -> list[Finding]:
    """CUDA_VISIBLE_DEVICES that hides everything, or names devices the host does not have."""
    if "CUDA_VISIBLE_DEVICES" not in env:
        return []
    raw = env["CUDA_VISIBLE_DEVICES"]
    entries = _parse_visible(raw)
    if not entries or entries == ["-1"]:
        return [Finding("warn", "cuda_visible_devices_empty",
                        f"CUDA_VISIBLE_DEVICES={raw!r} hides every GPU from torch",
                        "unset CUDA_VISIBLE_DEVICES, or list the GPUs to use, e.g. CUDA_VISIBLE_DEVICES=0,1")]
    indices = [int(e) for e in entries if e.isdigit()]
    if physical is not None:
        missing = [i for i in indices if i >= physical]
        if missing:
            return [Finding("error", "cuda_visible_devices_missing",
                            f"CUDA_VISIBLE_DEVICES={raw!r} names device(s) {missing} but the host has "
                            f"{physical} GPU(s) (indices 0..{physical - 1}); CUDA stops at the first bad entry",
                            f"set CUDA_VISIBLE_DEVICES to existing indices, e.g. "
                            f"{','.join(str(i) for i in range(max(physical, 1)))}" if physical else
                            "unset CUDA_VISIBLE_DEVICES: this host has no NVIDIA GPU")]
    if visible < len(entries):
        return [Finding("warn", "cuda_visible_devices_missing",
                        f"CUDA_VISIBLE_DEVICES={raw!r} lists {len(entries)} device(s) but torch sees {visible}",
                        "check the indices/UUIDs with `nvidia-smi -L` and fix CUDA_VISIBLE_DEVICES")]
    return []


def port_is_free(port: int, host: str = "") -> bool:
    """True if a TCP listener could bind ``port`` now (what the rendezvous store will do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def is_local_address(host: str) -> bool:
    """Whether ``host`` resolves to an address of this machine (so its ports can be checked here)."""
    try:
        addr = socket.gethostbyname(host)
        with socket.socket() as s:
            s.bind((addr, 0))
        return True
    except OSError:
        return False


def check_master_port(env: Mapping[str, str]) -> list[Finding]:
    """A rendezvous port that is taken makes rank 0 fail with 'address already in use'."""
    addr = env.get("MASTER_ADDR", "localhost")
    raw = env.get("MASTER_PORT")
    if raw is not None:
        if not raw.isdigit() or not 0 < int(raw) < 65536:
            return [Finding("error", "master_port_invalid", f"MASTER_PORT={raw!r} is not a port number",
                            f"export MASTER_PORT={free_port()}")]
        if not is_local_address(addr):
            return [Finding("info", "master_port_remote",
                            f"MASTER_ADDR={addr} is not this host; MASTER_PORT={raw} can only be checked there")]
        if not port_is_free(int(raw)):
            return [Finding("error", "master_port_busy",
                            f"MASTER_PORT={raw} is already in use on this host (another job or a stale rank)",
                            f"export MASTER_PORT={free_port()} (a free port now), or stop the process on "
                            f"{raw}: `ss -ltnp 'sport = :{raw}'`")]
        return []
    if not port_is_free(DEFAULT_MASTER_PORT):
        return [Finding("warn", "default_master_port_busy",
                        f"MASTER_PORT is unset and the default {DEFAULT_MASTER_PORT} is in use on this host",
                        f"export MASTER_PORT={free_port()} before launching")]
    return []


def check_shm(size: int | None) -> list[Finding]:
    if size is None or size >= SHM_MIN_BYTES:
        return []
    return [Finding("warn", "shm_small",
                    f"/dev/shm is only {size / 2**20:.0f} MiB; NCCL and DataLoader workers need >= 1 GiB",
                    "in docker run with --shm-size=8g (or --ipc=host); on Kubernetes mount an emptyDir "
                    "with medium: Memory at /dev/shm")]


def check_nccl_env(env: Mapping[str, str], n_gpus: int, ib_devices: list[str]) -> list[Finding]:
    """NCCL_* settings that slow collectives down or spam logs."""
    found = []
    if env.get("NCCL_P2P_DISABLE", "0") not in ("0", ""):
        found.append(Finding("warn" if n_gpus >= 2 else "info", "nccl_p2p_disabled",
                             "NCCL_P2P_DISABLE is set: GPU-to-GPU traffic goes through host memory, "
                             "all-reduce bandwidth drops sharply",
                             "unset NCCL_P2P_DISABLE unless P2P hangs on this host (check `nvidia-smi topo -m` "
                             "and that IOMMU/ACS is off)"))
    if env.get("NCCL_IB_DISABLE", "0") not in ("0", "") and ib_devices:
        found.append(Finding("warn", "nccl_ib_disabled",
                             f"NCCL_IB_DISABLE is set although InfiniBand is present ({', '.join(ib_devices)}): "
                             "multi-node traffic falls back to TCP sockets",
                             "unset NCCL_IB_DISABLE to use InfiniBand/RoCE between nodes"))
    debug = env.get("NCCL_DEBUG", "").upper()
    if debug in ("INFO", "TRACE"):
        found.append(Finding("warn", "nccl_debug_verbose",
                             f"NCCL_DEBUG={debug} prints per-rank setup logs on every run (and TRACE slows it)",
                             "unset NCCL_DEBUG or set NCCL_DEBUG=WARN once the setup works"))
    if n_gpus >= 2 and env.get("NCCL_NVLS_ENABLE") != "0":
        found.append(Finding("info", "nccl_nvls_enabled",
                             "NCCL_NVLS_ENABLE is not 0: NCCL may use NVLink multicast (NVLS) on NVSwitch systems",
                             "on shared hosts export NCCL_NVLS_ENABLE=0"))
    return found


def check_omp(env: Mapping[str, str], procs: int, cores: int, threads_per_proc: int) -> list[Finding]:
    """Each rank defaults to one thread per core: N ranks then oversubscribe the CPU N-fold."""
    if "OMP_NUM_THREADS" in env or procs < 2 or procs * threads_per_proc <= cores:
        return []
    per = max(1, cores // procs)
    return [Finding("warn", "omp_threads_unset",
                    f"OMP_NUM_THREADS is unset: {procs} processes x {threads_per_proc} threads on {cores} cores "
                    "oversubscribes the CPU",
                    f"export OMP_NUM_THREADS={per} ({procs} processes on {cores} cores)")]


def check_torch_build(versions: Mapping[str, Any], cuda_available: bool, physical: int | None) -> list[Finding]:
    has_gpus = bool(physical)
    if has_gpus and not versions.get("cuda_runtime") and not versions.get("hip_runtime"):
        return [Finding("error", "torch_without_cuda",
                        f"{physical} NVIDIA GPU(s) present but torch {versions['torch']} was built without CUDA",
                        "install a CUDA build matching the driver, e.g. "
                        "`pip install torch --index-url https://download.pytorch.org/whl/cu126`")]
    if has_gpus and not cuda_available:
        return [Finding("error", "cuda_unavailable",
                        f"torch is built for CUDA {versions.get('cuda_runtime')} but cannot use the GPUs "
                        f"(driver {versions.get('driver')})",
                        "update the NVIDIA driver or install a torch build for an older CUDA; check `nvidia-smi`")]
    if not cuda_available:
        return [Finding("info", "no_gpu", "no GPU visible: training runs on CPU processes over gloo")]
    return []


def check_backends(versions: Mapping[str, Any], n_gpus: int) -> list[Finding]:
    found = []
    if not versions.get("gloo_available"):
        found.append(Finding("error", "gloo_unavailable", "torch.distributed has no gloo backend",
                             "install an official torch wheel (gloo ships with it)"))
    if n_gpus >= 1 and not versions.get("nccl_available"):
        found.append(Finding("error", "nccl_unavailable", "GPUs are visible but torch has no NCCL backend",
                             "install an official CUDA torch wheel for Linux (NCCL ships with it)"))
    return found


def check_gpus(gpus: list[dict[str, Any]]) -> list[Finding]:
    """Uneven hardware and memory already taken by other processes."""
    found = []
    names = sorted({g["name"] for g in gpus})
    if len(names) > 1:
        found.append(Finding("warn", "mixed_gpu_models",
                             f"different GPU models visible ({', '.join(names)}): DDP steps at the slowest one's pace",
                             "restrict CUDA_VISIBLE_DEVICES to identical GPUs, or give the faster ones a "
                             "larger share only with a framework that supports it"))
    for g in gpus:
        if g["total_bytes"] and g["free_bytes"] < LOW_FREE_FRACTION * g["total_bytes"]:
            found.append(Finding("warn", "gpu_low_free_memory",
                                 f"GPU {g['index']} has {g['free_bytes'] / GIB:.1f} of {g['total_bytes'] / GIB:.1f} "
                                 "GiB free: other processes are using it",
                                 f"see `nvidia-smi` for processes on GPU {g['index']}; stop them or exclude "
                                 "this GPU via CUDA_VISIBLE_DEVICES"))
    return found


def check_p2p(p2p: list[list[bool]]) -> list[Finding]:
    pairs = [(i, j) for i, row in enumerate(p2p) for j, ok in enumerate(row) if i < j and not ok]
    if not pairs:
        return []
    shown = ", ".join(f"{i}<->{j}" for i, j in pairs[:6])
    return [Finding("warn", "p2p_unavailable",
                    f"no peer-to-peer access between GPU pairs {shown}: NCCL routes them through host memory",
                    "check `nvidia-smi topo -m`; on bare metal disable IOMMU/PCIe ACS, in VMs enable P2P passthrough")]


def check_bandwidth(bw: Mapping[str, Any] | None) -> list[Finding]:
    if not bw or bw.get("status") in (None, "ok", "skipped"):
        return []
    return [Finding("error", f"bandwidth_{bw['status']}",
                    f"{bw['backend']} all-reduce over {bw['world_size']} processes {bw['status']}: {bw['detail']}",
                    "rerun with NCCL_DEBUG=WARN (or TORCH_DISTRIBUTED_DEBUG=DETAIL) to see which rank "
                    "stalls; check firewalls and MASTER_ADDR")]


def check_memory(plan: Mapping[str, Any] | None) -> list[Finding]:
    if not plan or plan["verdict"] == "fits":
        return []
    if "per_device" in plan:
        over = [r for r in plan["per_device"] if r["fits"] is False]
        return [Finding("error", "memory_does_not_fit",
                        f"{r['device']} needs {r['total'] / GIB:.2f} GiB for {', '.join(r['models'])}; "
                        f"{r['free_bytes'] * 0.9 / GIB:.2f} GiB usable",
                        "move a frozen model to placement.<model>=cpu or offload, or a model to another cuda:N")
                for r in over]
    severity = "error" if plan["verdict"] == "does_not_fit" else "warn"
    return [Finding(severity, f"memory_{plan['verdict']}",
                    f"model {plan['model']['name']!r} needs {plan['ddp']['total'] / GIB:.2f} GiB per rank with "
                    f"DDP; {plan['usable_bytes'] / GIB:.2f} GiB usable",
                    plan["recommendation"])]


# ---------------------------------------------------------------------------- recommendations

def recommendations(findings: list[Finding], n_gpus: int, procs: int,
                    memory_plan: Mapping[str, Any] | None) -> list[str]:
    """Concrete next steps: the fixes of the problems found, plus how to launch on what is here."""
    recs = []
    if n_gpus >= 2:
        recs.append(f"use --gpus -1: {n_gpus} GPUs visible")
    elif n_gpus == 1:
        recs.append("one GPU visible: train with --gpus 1 (multi-GPU flags add nothing here)")
    for f in sorted(findings, key=lambda f: SEVERITIES.index(f.severity)):
        if f.fix and f.severity in ("error", "warn") and f.fix not in recs:
            recs.append(f.fix)
    if memory_plan and memory_plan["verdict"] == "fits" and "recommendation" in memory_plan:
        recs.append(memory_plan["recommendation"])
    if n_gpus == 0 and procs >= 2 and not any(f.code == "omp_threads_unset" for f in findings):
        recs.append(f"CPU training: {procs} gloo processes on {cpu_count()} cores "
                    f"({max(1, cpu_count() // procs)} thread(s) each)")
    return recs


def world_size_for(n_gpus: int, procs: int) -> int:
    return n_gpus if n_gpus >= 1 else procs
