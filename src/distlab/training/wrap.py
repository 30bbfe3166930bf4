"""Model wrapping: DDP or FSDP2, optional ``torch.compile``, bf16/fp16 autocast, accumulation without sync."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch
from torch import nn

from distlab.config import CompileMode, DistConfig, Precision, Wrap
from distlab.errors import DistlabError
from distlab.runtime.dist import Runtime
from distlab.training.activation_ckpt import apply_activation_checkpointing
from distlab.training.comm_hooks import register_comm_hook

# torch 2.13 deprecates DDP's broadcast_buffers for forward_sync_buffers, whose False still broadcasts every buffer at
# init. distlab keeps broadcast_buffers=False on purpose, as torch's warning itself advises until init_sync_buffers
# exists: HRM's puzzle table is a buffer of up to a million rows that must not cross the network at every start. The
# warning, printed by every rank of every multi-process run, gave a user nothing to act on.
warnings.filterwarnings("ignore", message="`broadcast_buffers` is deprecated", category=FutureWarning)


def wrap_model(model: nn.Module, rt: Runtime, cfg: DistConfig, shard_modules: list[nn.Module] | None = None,
               find_unused: bool = False, device: torch.device | None = None, wrap: Wrap | None = None,
               compile: bool | None = None) -> nn.Module:
    """Place ``model`` on the device and wrap it for data parallelism as ``cfg.wrap`` says.

    FSDP2 shards each module in ``shard_modules`` (e.g. transformer blocks) and then the root, so
    only one block's full parameters exist at a time; DDP keeps whole replicas and overlaps the
    bucketed gradient all-reduce with the backward pass. Activation checkpointing
    (``dist.activation_checkpointing``) wraps the declared blocks first and a DDP communication
    hook (``dist.comm_hook``) is registered on the DDP wrapper, so all three compose with compile.
    """
    device = rt.device if device is None else device
    model = model.to(device)
    wrap = Wrap(cfg.wrap if wrap is None else wrap)
    trainable = any(p.requires_grad for p in model.parameters())
    wrappers = apply_activation_checkpointing(model, cfg.activation_checkpointing if trainable else "none",
                                              shard_modules or [], type(model).__name__, required=False)
    compile = cfg.compile if compile is None else compile
    if compile:
        import torch._dynamo

        # process-wide in torch; every model of a run shares the run's one setting
        torch._dynamo.config.optimize_ddp = bool(getattr(cfg, "compile_split_ddp", True))
    if rt.distributed and wrap == Wrap.ddp and trainable:
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [device.index] if device.type == "cuda" else None
        # a CPU-placed model in an NCCL job reduces its gradients over the gloo side group; a Runtime.subgroup's
        # model (the trainer ranks of a job whose other ranks sample) over its own ranks only
        group = rt._monitor if device.type == "cpu" and rt.backend == "nccl" else rt.group
        # DDP around the compiled model, not the other way round: Dynamo does not trace DDP's own forward (its
        # reducer bookkeeping, its context managers), so compiling DDP broke the graph three times in every
        # forward before reaching the model. The model is still compiled inside DDP's forward, where Dynamo's
        # DDPOptimizer splits it at the gradient buckets (dist.compile_split_ddp) as before; checkpoint names
        # skip both wrappers alike. Gradients as views into the all-reduce buckets: no copy into the buckets
        # before and back after the all-reduce, each step, and one gradient-sized buffer less.
        model = DDP(compiled(model, cfg.compile_mode) if compile else model, device_ids=ids,
                    bucket_cap_mb=cfg.bucket_mb, broadcast_buffers=False, find_unused_parameters=find_unused,
                    process_group=group, gradient_as_bucket_view=True)
        register_comm_hook(model, cfg.comm_hook, group, cfg.powersgd_rank, cfg.powersgd_start_iter)
        return model
    if wrap == Wrap.fsdp and (rt.distributed or cfg.cpu_offload):
        from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

        if not rt.distributed:
            rt.single_process_group()  # FSDP2 needs a group, even of one, to offload a single GPU's model
        # pinned host memory makes the copies asynchronous; it needs an accelerator
        policy = {"offload_policy": CPUOffloadPolicy(pin_memory=device.type == "cuda")} if cfg.cpu_offload else {}
        if rt.group is not None:  # a Runtime.subgroup's ranks shard among themselves (the default mesh is the job)
            from torch.distributed.device_mesh import DeviceMesh

            policy["mesh"] = DeviceMesh.from_group(rt.group, rt.comm_device.type)
        for m in shard_modules or []:
            fully_shard(wrappers.get(id(m), m), **policy)  # a checkpointed block is sharded as its wrapper
        fully_shard(model, **policy)
        if cfg.cpu_offload:  # its parameters now live on the host; it still computes on `device`
            model._distlab_offload_device = device  # type: ignore[attr-defined]  (read by placement.compute_device)
    return compiled(model, cfg.compile_mode) if compile else model


def compiled(model: nn.Module, mode: CompileMode | str = CompileMode.default) -> nn.Module:
    """``torch.compile`` with the configured mode (the default mode passes none, as torch's own default)."""
    mode = CompileMode(mode)
    return torch.compile(model) if mode == CompileMode.default else torch.compile(model, mode=mode.value)


def replays_cuda_graphs(cfg, device: torch.device) -> bool:
    """Whether a model wrapped under ``cfg`` (a ``DistConfig``) replays CUDA graphs on ``device``: then each call's
    outputs are overwritten by the next call, and a caller that keeps them must copy them out."""
    return bool(cfg.compile) and device.type == "cuda" and CompileMode(cfg.compile_mode).replays_cuda_graphs


def unwrap(model: nn.Module) -> nn.Module:
    """The user's module under DDP and torch.compile wrappers (FSDP2 modifies in place). DDP wraps the compiled
    model (:func:`wrap_model`); a compile wrapper outside DDP is removed as well."""
    inner = getattr(model, "_orig_mod", model)
    inner = getattr(inner, "module", inner)
    return getattr(inner, "_orig_mod", inner)


@contextlib.contextmanager
def no_sync(model: nn.Module, active: bool) -> Iterator[None]:
    """Skip the gradient all-reduce on accumulation micro-steps (DDP ``no_sync``, FSDP2 flag)."""
    inner = getattr(model, "_orig_mod", model)
    if active and hasattr(inner, "no_sync"):
        with inner.no_sync():
            yield
    elif active and hasattr(inner, "set_requires_gradient_sync"):
        inner.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            inner.set_requires_gradient_sync(True)
    else:
        yield


def autocast(rt: Runtime, precision: Precision | str) -> contextlib.AbstractContextManager:
    """bf16 or fp16 autocast on the rank's device (fp16 needs the loss scaling of :mod:`distlab.training.amp`)."""
    precision = Precision(precision)
    if precision == Precision.bf16:
        return torch.autocast(device_type=rt.device.type, dtype=torch.bfloat16)
    if precision == Precision.fp16:
        return torch.autocast(device_type=rt.device.type, dtype=torch.float16)
    return contextlib.nullcontext()


def clip_grad_norm(model: nn.Module, max_norm: float) -> torch.Tensor:
    """Clip by global norm (works on DTensor grads under FSDP2); the pre-clip norm as a device tensor.

    Reading it as a number waits for the GPU to finish the step, so a training loop keeps the tensor and
    reads it only when it logs (the H200 profile of HRM's step found this wait once per step).
    """
    params = [p for p in model.parameters() if p.grad is not None]
    if not params:
        return torch.zeros(())
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else float("inf"))
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    return norm.detach()


def clip_grad(model: nn.Module, max_norm: float) -> float:
    """:func:`clip_grad_norm` read as a number at once (loops that log every step)."""
    return float(clip_grad_norm(model, max_norm))


def set_fast_math(rt: Runtime, tf32: bool) -> None:
    if rt.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32


def check_gpus_available(requested: int) -> int:
    """Resolve ``--gpus`` (-1 = all visible) or fail naming how many exist."""
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if requested == -1:
        if have == 0:
            raise DistlabError("--gpus -1 but no GPU is visible; use --procs N to run on CPU")
        return have
    if requested > have:
        raise DistlabError(f"--gpus {requested} but only {have} GPU(s) are visible; use --gpus {have or 'with a GPU'}"
                           + ("" if have else " or --procs N for CPU"))
    return requested
