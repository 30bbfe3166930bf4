"""Distributed runtime: who am I, which device, and collectives that fail loudly instead of hanging.

Works the same whether the process was started by torchrun (or ``accelerate launch``, which sets the
same variables), by ``srun`` under SLURM, or directly as a single process.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import logging
import os
import random
import socket
import subprocess
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from distlab.errors import DistlabError

log = logging.getLogger("distlab")

_MAX_GATHER_DIMS = 8  # all_gather_ragged exchanges shapes in one fixed-size tensor


class PeerLostError(DistlabError):
    """A collective failed because *other* ranks did not arrive (late, stopped, crashed, killed).

    The rank that raises it is a witness, not the cause: its exit line says ``peer`` so that the
    launcher blames the rank it names instead.
    """


@dataclass
class LaunchEnv:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    launcher: str  # torchrun | slurm | single


def detect_env(environ: dict[str, str] | None = None) -> LaunchEnv:
    """Read rank/world size from torchrun/accelerate (RANK...), then SLURM (SLURM_PROCID...)."""
    env = os.environ if environ is None else environ
    if "RANK" in env and "WORLD_SIZE" in env:
        ws = int(env["WORLD_SIZE"])
        return LaunchEnv(int(env["RANK"]), int(env.get("LOCAL_RANK", env["RANK"])), ws,
                         int(env.get("LOCAL_WORLD_SIZE", ws)), "torchrun")
    if "SLURM_PROCID" in env and int(env.get("SLURM_NTASKS", "1")) > 1 and "SLURM_STEP_ID" in env:
        ws = int(env["SLURM_NTASKS"])
        return LaunchEnv(int(env["SLURM_PROCID"]), int(env.get("SLURM_LOCALID", "0")), ws,
                         int(env.get("SLURM_NTASKS_PER_NODE", ws)), "slurm")
    return LaunchEnv(0, 0, 1, 1, "single")


def _slurm_master(env: dict[str, str]) -> tuple[str, str]:
    addr = env.get("MASTER_ADDR")
    if not addr:
        nodes = env.get("SLURM_JOB_NODELIST", "localhost")
        try:
            addr = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True,
                                  check=True, timeout=30).stdout.split()[0]
        except (OSError, subprocess.SubprocessError, IndexError):
            addr = nodes.split(",")[0]
    port = env.get("MASTER_PORT") or str(20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000)
    return addr, port


@dataclass
class Runtime:
    """This process's place in the job; collectives are no-ops when ``world_size == 1``."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    devices: list[torch.device] = field(default_factory=list)  # this rank's GPUs (dist.devices_per_rank)
    backend: str = "none"
    launcher: str = "single"
    timeout_s: float = 600.0
    _monitor: Any = None  # gloo group used to name late ranks (monitored_barrier is gloo-only)
    group: Any = None  # the process group of its collectives: None = the whole job, else a :meth:`subgroup`'s

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1 and dist.is_initialized()

    @property
    def comm_device(self) -> torch.device:
        """Where a tensor must live to take part in a collective: NCCL moves only CUDA tensors, gloo only CPU ones."""
        return self.device if self.backend == "nccl" else torch.device("cpu")

    @property
    def cpu_group(self) -> Any:
        """The group its object collectives and barriers travel on: gloo (the monitor group under NCCL)."""
        return self._monitor if self._monitor is not None else self.group

    def global_rank(self, rank: int, group: Any = None) -> int:
        """The job-wide rank of this Runtime's ``rank`` (torch's collectives name peers by job-wide rank)."""
        group = self.group if group is None else group
        return rank if group is None else dist.get_global_rank(group, rank)

    def subgroup(self, ranks: list[int], timeout_s: float | None = None) -> Runtime | None:
        """A Runtime whose collectives run over ``ranks`` (ranks of this one, ascending) only, each ranked by its place
        in the list; None on a rank outside them.

        For a job whose ranks take different roles (some train, others only sample): the trainers' gradients,
        checkpoints and metrics agree among themselves while the other ranks do something else. Collective over the
        whole job, not only this Runtime's ranks: torch's ``new_group`` waits for every process of the job, member or
        not, in the same order. So call it on the job's Runtime, every rank with the same ranks (a subgroup's own
        subgroup would wait for the ranks outside it, which never call it).
        ``timeout_s``: how long its collectives wait for a member (this Runtime's ``timeout_s`` if not given).
        """
        if list(ranks) != sorted(set(ranks)) or not ranks or ranks[0] < 0 or ranks[-1] >= self.world_size:
            raise DistlabError(f"subgroup ranks must be distinct, ascending and below {self.world_size}: {ranks}")
        members = [self.global_rank(r) for r in ranks]
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        timeout = _dt.timedelta(seconds=timeout_s)
        group = monitor = None
        if self.distributed:
            group = dist.new_group(members, timeout=timeout)
            monitor = _gloo_subgroup(members, timeout) if self.backend != "gloo" else None
        if self.rank not in ranks:
            return None
        return dataclasses.replace(self, rank=ranks.index(self.rank), world_size=len(ranks), group=group,
                                   _monitor=monitor, timeout_s=timeout_s)

    def alone(self) -> Runtime:
        """This rank by itself: a Runtime of one whose collectives return at once, for a rank that takes part in no
        group of its role (a rollout rank of a job split into roles). It keeps its job-wide rank, so only the job's
        rank 0 is ever the main rank that logs and writes."""
        return dataclasses.replace(self, world_size=1, group=None, _monitor=None)

    def send_object(self, obj: Any, dst: int) -> None:
        """Send a picklable ``obj`` to rank ``dst`` alone (over gloo), which takes it with :meth:`recv_object`.
        Blocks until ``dst`` takes it."""
        dist.send_object_list([obj], dst=self.global_rank(dst, self.cpu_group), group=self.cpu_group)

    def recv_object(self, src: int) -> Any:
        """The object rank ``src`` sends with :meth:`send_object`."""
        box: list[Any] = [None]
        dist.recv_object_list(box, src=self.global_rank(src, self.cpu_group), group=self.cpu_group)
        return box[0]

    @classmethod
    def from_process_group(cls, device: torch.device | str = "cpu", timeout_s: float = 600.0) -> Runtime:
        """A Runtime for a process group someone else initialised (a script calling ``init_process_group``
        itself, a test harness), or a single process when there is none.

        Lets library code such as PPO's ``train`` take a Runtime while still being callable outside
        ``distlab train``. Collective under NCCL (it creates the gloo group that names late ranks), so
        every rank calls it.
        """
        dev = torch.device(device)
        if not (dist.is_available() and dist.is_initialized()):
            return cls(device=dev, timeout_s=timeout_s)
        rank, world = dist.get_rank(), dist.get_world_size()
        backend = str(dist.get_backend())
        rt = cls(rank=rank, local_rank=int(os.environ.get("LOCAL_RANK", rank)), world_size=world,
                 local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", world)), device=dev, backend=backend,
                 launcher="external", timeout_s=timeout_s)
        if backend != "gloo" and world > 1:
            rt._monitor = dist.new_group(backend="gloo", timeout=_dt.timedelta(seconds=timeout_s))
        return rt

    def single_process_group(self) -> None:
        """A process group of this one process (an in-memory store, no network), for engines such as FSDP2's CPU
        offload that need one; collectives of this Runtime stay no-ops, as for any single process."""
        if not dist.is_initialized():
            be = "nccl" if self.device.type == "cuda" else "gloo"
            dist.init_process_group(be, store=dist.HashStore(), rank=0, world_size=1,
                                    **({"device_id": self.device} if be == "nccl" else {}))

    # -- collectives -------------------------------------------------------------------------
    def barrier(self, label: str, timeout_s: float | None = None) -> None:
        """A barrier that, on timeout, fails with the ranks that never arrived named."""
        if not self.distributed:
            return
        timeout = _dt.timedelta(seconds=timeout_s or self.timeout_s)
        try:
            dist.monitored_barrier(group=self.cpu_group, timeout=timeout, wait_all_ranks=True)
        except RuntimeError as exc:
            raise PeerLostError(_late_ranks_message(str(exc), label, timeout.total_seconds())) from None

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        if not self.distributed:
            return obj
        box = [obj if self.rank == src else None]
        dist.broadcast_object_list(box, src=self.global_rank(src, self.cpu_group), group=self.cpu_group)
        return box[0]

    def all_gather_object(self, obj: Any) -> list[Any]:
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.cpu_group)
        return out

    def reduce_sums(self, sums: dict[str, float | torch.Tensor]) -> dict[str, float]:
        """Sum metric totals over ranks exactly (divide by a summed count afterwards, as HRM does)."""
        if not sums:
            return {}
        keys = sorted(sums)
        vec = torch.tensor([float(sums[k]) for k in keys], dtype=torch.float64)
        if self.distributed:
            dev = self.device if self.backend == "nccl" else torch.device("cpu")
            vec = vec.to(dev)
            dist.all_reduce(vec, group=self.group)
            vec = vec.cpu()
        return dict(zip(keys, vec.tolist()))

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` summed over ranks, on ``tensor``'s device; the input is left unchanged.

        For counts and moments a recipe must agree on before its loss (global token counts, a batch
        std): one collective on whatever device the backend moves (CUDA under NCCL, the CPU under gloo).
        Collective: every rank calls it with the same shape and dtype.
        """
        if not self.distributed:
            return tensor.clone()
        x = tensor.to(self.comm_device, copy=True)
        dist.all_reduce(x, group=self.group)
        return x.to(tensor.device)

    def broadcast_(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        """Overwrite ``tensor`` in place with rank ``src``'s copy; returns it.

        For state that must start identical where ranks seed differently (PPO's policy weights).
        The copy travels on the backend's device and lands back where ``tensor`` lives. Collective:
        every rank calls it with the same shape and dtype.
        """
        if not self.distributed:
            return tensor
        x = tensor if tensor.device == self.comm_device else tensor.to(self.comm_device)
        dist.broadcast(x, src=self.global_rank(src), group=self.group)
        if x is not tensor:
            tensor.copy_(x)
        return tensor

    def any_flags(self, *flags: bool) -> tuple[bool, ...]:
        """Each flag True on every rank if it is True on any rank: one collective for all of them.

        Called once per training step (stop signals, time limits), so it travels over the CPU (gloo) group even
        under NCCL: a CUDA tensor read back on the host waits for every kernel queued so far, which keeps the host
        from queueing the next step while the GPU runs this one.
        """
        if not self.distributed:
            return tuple(bool(f) for f in flags)
        t = torch.tensor([float(f) for f in flags])
        if self._monitor is not None:
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self._monitor)
        else:
            t = t.to(self.comm_device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return tuple(bool(v > 0) for v in t.tolist())

    def all_gather_equal(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's ``tensor`` concatenated along dim 0 in rank order, for shapes equal on every rank.

        The fixed-shape sibling of :meth:`all_gather_ragged`: one collective, no shape exchange and no host
        synchronisation, for per-step exchanges whose sizes the configuration fixes (rows of an equal per-rank
        batch). The caller vouches for the equal shapes: unequal ones fail inside the backend or hang.
        """
        if not self.distributed:
            return tensor
        local = tensor.to(self.comm_device).contiguous()
        out = local.new_empty((local.shape[0] * self.world_size, *local.shape[1:]))
        dist.all_gather_into_tensor(out, local, group=self.group)
        return out.to(tensor.device)

    def all_gather_ragged(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's ``tensor`` concatenated along dim 0 in rank order; ranks may hold different lengths, 0 too.

        For per-rank results whose count varies (finished episodes, touched embedding rows, rewards of
        a group of completions). ``all_gather`` needs equal shapes, so one small all-gather first
        exchanges the shapes, each rank pads to the longest, and the padding is cut off again. The
        shape exchange also lets every rank raise the same error when the trailing dimensions
        disagree, instead of some ranks hanging in the second collective. Collective: every rank
        calls it with the same dtype. The result lies on ``tensor``'s device.
        """
        if tensor.dim() == 0:
            raise DistlabError("all_gather_ragged needs a tensor with a first dimension, not a scalar")
        if not self.distributed:
            return tensor
        if tensor.dim() > _MAX_GATHER_DIMS:
            raise DistlabError(f"all_gather_ragged takes tensors of at most {_MAX_GATHER_DIMS} dimensions, "
                               f"got {tensor.dim()}")
        dev = self.comm_device
        local = tensor.to(dev)
        shape = torch.full((_MAX_GATHER_DIMS + 1,), -1, dtype=torch.long, device=dev)
        shape[0] = local.dim()
        shape[1:local.dim() + 1] = torch.tensor(local.shape, dtype=torch.long)
        shapes = [torch.empty_like(shape) for _ in range(self.world_size)]
        dist.all_gather(shapes, shape, group=self.group)
        rows = [s.tolist() for s in shapes]
        trailing = {tuple(r[2:r[0] + 1]) for r in rows}
        if len(trailing) > 1 or len({r[0] for r in rows}) > 1:
            per_rank = ", ".join(f"rank {i}: {tuple(r[1:r[0] + 1])}" for i, r in enumerate(rows))
            raise DistlabError(f"all_gather_ragged: ranks disagree beyond the first dimension ({per_rank})")
        sizes = [r[1] for r in rows]
        longest = max(sizes)
        if longest == 0:
            return tensor.new_empty((0, *tensor.shape[1:]))
        padded = local.new_zeros((longest, *local.shape[1:]))
        padded[:local.shape[0]] = local
        parts = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(parts, padded, group=self.group)
        return torch.cat([p[:n] for p, n in zip(parts, sizes)]).to(tensor.device)

    # -- seeds and checks --------------------------------------------------------------------
    def seed_everything(self, seed: int, per_rank: bool = False) -> int:
        """Same seed everywhere for parameter init; ``per_rank`` for data/exploration diversity."""
        s = seed + (self.rank * 1_000_003 if per_rank else 0)
        random.seed(s)
        np.random.seed(s % 2**32)
        torch.manual_seed(s)
        return s

    def verify_identical(self, module: torch.nn.Module, what: str = "parameters") -> str:
        """Prove that every rank holds the same parameters; return the fingerprint.

        Each tensor is fingerprinted where it lives (its bits summed as integers, plain and position
        weighted, which wraps identically on every rank), and only those two numbers per tensor are
        all-gathered: no parameter is copied through the CPU, so a 0.5B-parameter model checks in seconds.
        """
        fp = tensor_fingerprints(module)
        if self.distributed:
            dev = self.device if self.backend == "nccl" else torch.device("cpu")
            mine = fp.to(dev)
            every = [torch.empty_like(mine) for _ in range(self.world_size)]
            dist.all_gather(every, mine, group=self.group)
            bad = [r for r, other in enumerate(every) if not torch.equal(other, every[0])]
            if bad:
                raise DistlabError(f"{what} differ on rank(s) {bad} from rank 0; seed or init is not "
                                   f"deterministic across ranks")
        return hashlib.sha1(fp.cpu().numpy().tobytes()).hexdigest()


_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@torch.no_grad()
def tensor_fingerprints(module: torch.nn.Module) -> torch.Tensor:
    """``[n_tensors, 2]`` int64 on CPU: bitwise sums of every parameter and buffer, computed on its device."""
    rows = []
    for _, t in sorted(module.state_dict().items()):
        if not isinstance(t, torch.Tensor) or t.numel() == 0:
            continue
        bits = t.detach().contiguous().view(_INT_OF_SIZE[t.element_size()]).flatten()
        pad = (-bits.numel()) % 64
        if pad:
            bits = torch.cat([bits, bits.new_zeros(pad)])
        blocks = bits.view(-1, 64).sum(1, dtype=torch.int64)  # position-sensitive through the block weights
        weight = torch.arange(1, blocks.numel() + 1, device=blocks.device, dtype=torch.int64)
        rows.append(torch.stack([blocks.sum(), (blocks * weight).sum()]).cpu())
    return torch.stack(rows) if rows else torch.zeros(0, 2, dtype=torch.int64)


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor of an FSDP2-sharded (DTensor) one, as a plain tensor; any other tensor unchanged.

    A collective for a DTensor: every rank must gather the same tensors in the same order. With
    ``dist.cpu_offload`` the shards live on the host while the mesh communicates on the GPU (NCCL moves no host
    tensors), so a shard goes to the mesh's device type first and the whole tensor comes back there.
    """
    from torch.distributed.tensor import DTensor

    if not isinstance(t, DTensor):
        return t
    local = t.to_local()
    if local.device.type != t.device_mesh.device_type:
        local = local.to(t.device_mesh.device_type)
        t = DTensor.from_local(local, t.device_mesh, t.placements, run_check=False, shape=t.shape, stride=t.stride())
    return t.full_tensor()


def full_state_dict(module: torch.nn.Module) -> dict[str, Any]:
    """``module.state_dict()`` with every sharded tensor gathered whole: what a plain (unsharded) copy of the
    model loads. A collective when the module is sharded."""
    return {name: full_tensor(t) if isinstance(t, torch.Tensor) else t for name, t in module.state_dict().items()}


_CHUNK = 1 << 24  # bytes per partial sum: 2**24 * 255 * 2**31 stays below 2**63, so no int64 sum overflows


def _position_weights(device: torch.device) -> torch.Tensor:
    idx = torch.arange(_CHUNK, device=device, dtype=torch.int64)
    return (idx * 2654435761) % (1 << 31) | 1


def _device_fingerprint(t: torch.Tensor, weights: dict[torch.device, torch.Tensor] | None = None) -> bytes:
    """Position-weighted byte sums of an accelerator tensor, computed there, one per 16 MiB chunk.

    Copying a 3B-parameter model to the host and hashing it there (SHA-1, about 1 GB/s) took minutes at the end
    of a run; these sums cost one pass on the device and one small read. Each byte is multiplied by an odd weight
    of its position in its chunk, so changing any one byte changes its chunk's sum; integer sums are exact, so
    the result does not depend on the order of summation. ``weights`` keeps one chunk's weights per device for
    the caller's tensors (made once, not per tensor).
    """
    flat = t.contiguous().reshape(-1).view(torch.uint8)
    weights = {} if weights is None else weights
    if flat.device not in weights:
        weights[flat.device] = _position_weights(flat.device)
    w = weights[flat.device]
    sums = [(flat[i:i + _CHUNK].to(torch.int64) * w[:min(_CHUNK, flat.numel() - i)]).sum()
            for i in range(0, flat.numel(), _CHUNK)]
    return np.asarray(torch.stack(sums).tolist() if sums else [], dtype=np.int64).tobytes()


def tensor_digest(t: torch.Tensor, weights: dict[torch.device, torch.Tensor] | None = None) -> bytes:
    """Bytes that change whenever ``t``'s bytes do: SHA-1 of them on the CPU (faster there than the sums),
    :func:`_device_fingerprint` on an accelerator (no copy of the weights to the host); pass one ``weights``
    dict for many tensors."""
    t = t.detach()
    if t.device.type == "cpu":
        return hashlib.sha1(t.contiguous().reshape(-1).view(torch.uint8).numpy()).digest()
    return _device_fingerprint(t, weights)


def module_checksum(module: torch.nn.Module) -> str:
    """A digest of ``module.state_dict()`` (names, dtypes, shapes, bytes), equal for equal weights under any
    sharding; the runs' summaries carry it so that tests compare trained models. Weights on the CPU and on a
    GPU digest differently (see :func:`tensor_digest`)."""
    h, weights = hashlib.sha1(), {}
    for name, t in sorted(module.state_dict().items()):
        t = full_tensor(t) if isinstance(t, torch.Tensor) else t
        if isinstance(t, torch.Tensor):
            h.update(f"{name}:{t.dtype}:{tuple(t.shape)}:{t.device.type == 'cpu'}:".encode())
            h.update(tensor_digest(t, weights))
    return h.hexdigest()


def _late_ranks_message(text: str, label: str, timeout: float) -> str:
    import re

    found = re.findall(r"[Rr]anks? ([\d, ]+?) failed", text)
    ranks = sorted({int(r) for group in found for r in re.findall(r"\d+", group)})
    who = f"rank(s) {', '.join(map(str, ranks))}" if ranks else "some rank"
    low = text.lower()
    if any(w in low for w in ("connection closed", "connection reset", "broken pipe", "connection refused")):
        # a peer that crashed is gone at once; calling that a timeout sends people chasing slowness
        return (f"{who} left the job (crashed or was killed) before reaching '{label}'; its own rank<N>.log "
                f"or stderr has the cause")
    return (f"{who} did not reach '{label}' within {timeout:.0f} s; the job stops instead of hanging "
            f"(raise dist.timeout_s if the step is just slow)")


def _pick_devices(local_rank: int, want: str, per_rank: int = 1) -> list[torch.device]:
    """The rank's devices: GPUs ``local_rank*K .. local_rank*K+K-1`` (K = devices_per_rank), or the CPU."""
    if want == "cpu" or (want == "auto" and not torch.cuda.is_available()):
        return [torch.device("cpu")]
    if not torch.cuda.is_available():
        raise DistlabError("dist.device=cuda but no CUDA device is visible; use dist.device=cpu or check "
                           "CUDA_VISIBLE_DEVICES")
    first, have = local_rank * per_rank, torch.cuda.device_count()
    if first + per_rank > have:
        raise DistlabError(f"local rank {local_rank} needs GPUs {first}..{first + per_rank - 1} but only {have} "
                           f"are visible; lower --gpus or dist.devices_per_rank")
    # set_device before any other CUDA call, so no rank creates a stray context on GPU 0
    torch.cuda.set_device(first)
    return [torch.device("cuda", first + i) for i in range(per_rank)]


def _gloo_subgroup(members: list[int], timeout: _dt.timedelta) -> Any:
    """A gloo group of ``members`` beside an NCCL job, made as if the default group were bound to no device.

    Under a device-bound default group (``init_process_group(device_id=...)``, as :func:`init_runtime` makes it)
    torch has every rank outside a new subgroup take part in an NCCL communicator split for it, whatever the
    subgroup's backend, while the members of a gloo subgroup never split: the non-members wait for a split no one
    makes. So a job whose ranks took roles (``async.rollout_ranks``) hung at start on 2 H100s (2026-11-28).
    ``use_local_synchronization`` avoids the split too, but deadlocks once two overlapping subgroups exist (rank 0 in
    both), which a job split into roles always has."""
    default = dist.group.WORLD
    bound = default.bound_device_id
    default.bound_device_id = None
    try:
        return dist.new_group(members, backend="gloo", timeout=timeout)
    finally:
        default.bound_device_id = bound


def init_runtime(backend: str = "auto", device: str = "auto", timeout_s: float = 600.0,
                 environ: dict[str, str] | None = None, devices_per_rank: int = 1) -> Runtime:
    """Join the process group described by the environment (or run alone)."""
    env = detect_env(environ)
    devices = _pick_devices(env.local_rank, device, devices_per_rank)
    dev = devices[0]
    be = backend if backend != "auto" else ("nccl" if dev.type == "cuda" else "gloo")
    rt = Runtime(env.rank, env.local_rank, env.world_size, env.local_world_size, dev, devices, "none", env.launcher,
                 timeout_s)
    if env.world_size == 1:
        return rt
    if env.launcher == "slurm":
        addr, port = _slurm_master(dict(os.environ))
        os.environ.setdefault("MASTER_ADDR", addr)
        os.environ.setdefault("MASTER_PORT", port)
        os.environ.update(RANK=str(env.rank), WORLD_SIZE=str(env.world_size), LOCAL_RANK=str(env.local_rank))
    timeout = _dt.timedelta(seconds=timeout_s)
    kwargs: dict[str, Any] = {"backend": be, "timeout": timeout}
    if be == "nccl":
        kwargs["device_id"] = dev
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # After a torchrun restart, gloo's full-mesh connect could read the dead attempt's
        # addresses from the agent's store and hang; a per-attempt key prefix keeps attempts apart.
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), env.world_size,
                              is_master=False, timeout=timeout)
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        kwargs.update(store=dist.PrefixStore(f"distlab/attempt{attempt}", store), rank=env.rank,
                      world_size=env.world_size)
    if not dist.is_initialized():
        dist.init_process_group(**kwargs)
    rt.backend = be
    rt._monitor = dist.new_group(backend="gloo", timeout=timeout) if be != "gloo" else None
    return rt


def shutdown(rt: Runtime) -> None:
    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # teardown after a failure must not mask the original error
            pass


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False
