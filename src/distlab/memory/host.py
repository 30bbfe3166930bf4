"""How much host memory a process can still take, and a refusal before training outgrows it.

A CPU run whose optimizer states do not fit is ended by the kernel's OOM killer: SIGKILL, no Python frame runs,
no line explains it. The states are allocated lazily at the first optimizer step, so their size is known (from
the parameters an optimizer holds) before the run starts to pay for it, and can be compared with what is free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from distlab.errors import DistlabError
from distlab.recipe import OPTIMIZER_STATE_BYTES, adam_state_key

GIB = 1024 ** 3


def meminfo(path: Path = Path("/proc/meminfo")) -> dict[str, int]:
    """``/proc/meminfo`` in bytes (empty where it cannot be read)."""
    info: dict[str, int] = {}
    try:
        for line in path.read_text().splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                info[key] = int(parts[0]) * 1024
    except OSError:
        pass
    return info


def _meminfo_available(path: Path = Path("/proc/meminfo")) -> int | None:
    return meminfo(path).get("MemAvailable")


def _cgroup_room(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """``memory.max - memory.current`` of this process's cgroup (v2), if it has a limit."""
    try:
        limit = (root / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int((root / "memory.current").read_text().strip()))
    except (OSError, ValueError):
        return None


def available_bytes() -> int | None:
    """Memory this process can still allocate: the host's MemAvailable, or less under a cgroup limit; None if
    neither can be read (then nothing is refused)."""
    values = [v for v in (_meminfo_available(), _cgroup_room()) if v is not None]
    return min(values) if values else None


def host_training_bytes(optimizers: list[torch.optim.Optimizer], state_dtype: Any) -> int:
    """Bytes the optimizers' host-resident parameters will add once training starts: a gradient per element and
    AdamW's moments at ``state_dtype``. Parameters on a GPU count nothing here (the doctor plans GPU memory)."""
    moments = OPTIMIZER_STATE_BYTES[adam_state_key(state_dtype)]
    total = 0
    for opt in optimizers:
        for group in opt.param_groups:
            for p in group["params"]:
                local = getattr(p, "_local_tensor", p)  # an FSDP2 shard: this rank's part only
                if local.device.type == "cpu" and p.requires_grad:
                    total += local.numel() * (local.element_size() + moments)
    return total


def check_room(name: str, need_per_rank: int, ranks_on_host: int, available: int | None) -> None:
    """Refuse, in one line, training whose host-resident state cannot fit in what is free."""
    need = need_per_rank * ranks_on_host
    if available is None or need <= available:
        return
    ranks = f" ({ranks_on_host} ranks on this host)" if ranks_on_host > 1 else ""
    raise DistlabError(f"model '{name}' trains on the CPU: its gradients and optimizer states need about "
                       f"{need / GIB:.1f} GiB more host memory{ranks} but {available / GIB:.1f} GiB is free; "
                       f"train it on GPUs (--gpus N), with fewer --procs, optim.state_dtype=bf16|int8, or a smaller "
                       f"model")
