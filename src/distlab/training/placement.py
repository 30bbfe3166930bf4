"""Several named models per run, each on its own device: ``models.<model>.placement=device|cuda:N|cpu|offload``.

(``placement.<model>=...``, the spelling of earlier versions, still works: the config composer rewrites it.)

A rank owns ``dist.devices_per_rank`` GPUs; ``cuda:N`` names the N-th of *its* devices, so one process
driving two GPUs and N data-parallel ranks each holding every model are one code path. ``device`` is the
rank's compute device (its first GPU, or the CPU on a CPU run). ``offload`` keeps a frozen model's
weights in pinned CPU memory and streams each layer's weights to the compute device when it runs, so
the model costs GPU memory for one layer at a time instead of all of them.

Frozen models are never wrapped, never all-reduced and never checkpointed: they are rebuilt from their
source. Trainable models get their own wrap (DDP, FSDP2 or none), dtype and compile setting.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import nn

from distlab.config import DistConfig, ModelSettings, Placement, PlacementKind, Wrap, wrap_of
from distlab.errors import DistlabError, near_matches
from distlab.runtime.dist import Runtime, full_tensor
from distlab.training.wrap import unwrap

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def check_dtype(name: str, dtype: str) -> None:
    """Weights are held in a float dtype only: int8/4-bit storage is for optimizer states (``optim.state_dtype``)."""
    if dtype not in DTYPES:
        hint = near_matches(str(dtype), DTYPES)
        raise DistlabError(f"models.{name}.dtype={dtype} is not one of {', '.join(DTYPES)}"
                           + (f" (did you mean {hint[0]}?)" if hint else "")
                           + ("; 8-bit storage is for the optimizer: optim.state_dtype=int8" if "8" in str(dtype)
                              else ""))


def validate_placement(placement: dict[str, str | Placement], models: Iterable[str], dist_cfg: DistConfig,
                       gpus_per_node: int | None, procs_per_node: int, frozen: Iterable[str] = ()) -> None:
    """Everything checkable before a process starts: names, syntax, device indices, GPU count."""
    known, frozen = list(models), set(frozen)
    for name, spec in placement.items():
        if name not in known:
            hint = near_matches(name, known)
            raise DistlabError(f"models.{name}: this recipe has no model {name!r}; its models are "
                               f"{', '.join(known)}" + (f" (did you mean {hint[0]}?)" if hint else ""))
        where = Placement.parse(spec, name)
        k = dist_cfg.devices_per_rank
        on_cpu_run = dist_cfg.device == "cpu" or gpus_per_node == 0
        if where.kind == PlacementKind.cuda and on_cpu_run:
            raise DistlabError(f"models.{name}.placement={spec} but this run has no GPU; use "
                               f"models.{name}.placement=cpu or device, or start with --gpus N")
        if where.kind == PlacementKind.cuda and where.index >= k:
            raise DistlabError(f"models.{name}.placement={spec} but each rank has dist.devices_per_rank={k} GPU(s) "
                               f"(cuda:0..cuda:{k - 1}); raise dist.devices_per_rank or use a lower index")
        if where.offload and name not in frozen:
            raise DistlabError(f"models.{name}.placement=offload streams weights per use and needs a frozen model; "
                               f"{name} is trained here: use cpu, device or cuda:N")
    if dist_cfg.devices_per_rank < 1:
        raise DistlabError(f"dist.devices_per_rank={dist_cfg.devices_per_rank} must be 1 or more")
    if dist_cfg.devices_per_rank > 1 and (dist_cfg.device == "cpu" or gpus_per_node == 0):
        raise DistlabError(f"dist.devices_per_rank={dist_cfg.devices_per_rank} spreads a rank's models over GPUs but "
                           f"this run has none; use dist.devices_per_rank=1 (models.<name>.placement=cpu places a "
                           f"model on the CPU)")
    if gpus_per_node is not None and gpus_per_node > 0 and dist_cfg.device != "cpu":
        need = dist_cfg.devices_per_rank * procs_per_node
        if need > gpus_per_node:
            raise DistlabError(f"{procs_per_node} rank(s) x dist.devices_per_rank={dist_cfg.devices_per_rank} need "
                               f"{need} GPUs but {gpus_per_node} are visible; lower --gpus or dist.devices_per_rank")


def device_for(name: str, where: Placement, rt: Runtime) -> torch.device:
    """The device a model *computes* on (for ``offload``: the compute device, weights stay on the CPU)."""
    if where.kind == PlacementKind.cpu:
        return torch.device("cpu")
    if where.kind != PlacementKind.cuda:
        return rt.device
    if rt.device.type != "cuda":
        raise DistlabError(f"models.{name}.placement={where} but this rank runs on the CPU; use cpu or device")
    devices = rt.devices or [rt.device]
    if where.index >= len(devices):
        raise DistlabError(f"models.{name}.placement={where} but this rank has {len(devices)} GPU(s); raise "
                           f"dist.devices_per_rank")
    return devices[where.index]


def check_config(cfg, procs_per_node: int, gpus_per_node: int | None) -> None:
    """Validate every ``models.<name>.placement`` of a recipe config (configs without ``models`` pass)."""
    models = getattr(cfg, "models", None)
    if models is None:
        if cfg.dist.devices_per_rank != 1:
            raise DistlabError(f"dist.devices_per_rank={cfg.dist.devices_per_rank} needs a recipe with several "
                               f"placed models; this one has a single model: use dist.devices_per_rank=1")
        return
    for name, m in models.items():
        check_dtype(name, m.dtype)
    frozen = [n for n, m in models.items() if not m.trainable]
    placement = {n: m.placement for n, m in models.items()}
    validate_placement(placement, _recipe_models(cfg), cfg.dist, gpus_per_node, procs_per_node, frozen)


def _recipe_models(cfg) -> list[str]:
    """The model names the recipe's schema declares: ``models.<typo>.placement=cpu`` adds an entry to the
    dict instead of failing to merge, so the names are checked against the schema's defaults."""
    try:
        return list(type(cfg)().models)
    except TypeError:  # a schema with required fields
        return list(cfg.models)


def place(name: str, model: nn.Module, settings: ModelSettings, rt: Runtime, dist_cfg: DistConfig,
          shard_modules: Sequence[nn.Module] | None = None) -> nn.Module:
    """Move, cast, freeze or wrap one model as its settings (placement among them) say."""
    from distlab.training.wrap import compiled, wrap_model

    where = Placement.parse(settings.placement, name)
    check_dtype(name, settings.dtype)
    model = model.to(DTYPES[settings.dtype])
    if settings.trainable:
        keep_trained_weights_fp32(model)
    device = device_for(name, where, rt)
    if not settings.trainable:
        model.requires_grad_(False)
        model.eval()
        if where.offload:
            return offload(model, device)
        model = model.to(device)
        return compiled(model, dist_cfg.compile_mode) if settings.compile else model
    return wrap_model(model, rt, dist_cfg, list(shard_modules or []), device=device, wrap=Wrap(wrap_of(settings, dist_cfg)),
                      compile=settings.compile)


def keep_trained_weights_fp32(model: nn.Module) -> int:
    """Put every parameter that trains back in fp32 after a cast to a narrower dtype; returns how many moved.

    AdamW adds ``lr * update`` to the weight it steps. At RL learning rates (1e-6..3e-6) that is below half a
    bf16 ulp for nearly every weight of a language model, so bf16 weights stepped in place never change (13
    GRPO steps at lr 2e-6 moved 0.57% of SmolLM2's bf16 weights, 99.6% of its fp32 ones). Trained weights are
    therefore always fp32 here; frozen ones (a LoRA base, a reference) keep the narrow dtype, and compute runs
    in ``dist.precision`` under autocast.
    """
    moved = 0
    for p in model.parameters():
        if p.requires_grad and p.dtype in (torch.bfloat16, torch.float16):
            p.data = p.data.float()
            moved += 1
    return moved


def offload(model: nn.Module, device: torch.device) -> nn.Module:
    """Keep weights in (pinned) CPU memory and copy each leaf module's weights in just for its forward.

    Buffers (rotary tables, norms' statistics) are small and move to ``device`` for good. On a CPU
    compute device this is a no-op apart from the hooks, which keeps the code path testable without GPUs.
    """
    pin = device.type == "cuda"
    for mod in model.modules():
        own = list(mod.parameters(recurse=False))
        for b_name, buf in list(mod.named_buffers(recurse=False)):
            mod._buffers[b_name] = buf.to(device)
        if not own:
            continue
        for p in own:
            p.data = p.data.to("cpu").pin_memory() if pin else p.data.to("cpu")
        mod.register_forward_pre_hook(_stream_in(device))
        mod.register_forward_hook(_stream_out)
    model._distlab_offload_device = device  # type: ignore[attr-defined]
    return model


def compute_device(model: nn.Module) -> torch.device:
    """Where ``model`` computes: an ``offload``-placed model and an FSDP2 model under ``dist.cpu_offload`` keep their
    weights on the CPU but run on their device, so inputs (and caches) must go there, not to where the parameters
    lie."""
    inner = unwrap(model)
    return getattr(inner, "_distlab_offload_device", None) or next(inner.parameters()).device


def _stream_in(device: torch.device):
    def hook(mod: nn.Module, args):  # noqa: ARG001
        mod._distlab_host = [p.data for p in mod.parameters(recurse=False)]  # type: ignore[attr-defined]
        for p in mod.parameters(recurse=False):
            p.data = p.data.to(device, non_blocking=True)
    return hook


def _stream_out(mod: nn.Module, args, output):  # noqa: ARG001
    for p, host in zip(mod.parameters(recurse=False), mod._distlab_host):  # type: ignore[attr-defined]
        p.data = host
    del mod._distlab_host  # type: ignore[attr-defined]


@torch.no_grad()
def soft_update_(target: nn.Module | Sequence[torch.Tensor], source: nn.Module | Sequence[torch.Tensor],
                 tau: float) -> None:
    """``target <- (1 - tau) target + tau source`` for every parameter, whatever device each lives on.

    Source tensors are copied to the target's device in one batch (the GPU -> CPU case of a target
    critic kept on the CPU), then one foreach lerp updates every target tensor.
    """
    if not 0.0 <= tau <= 1.0:
        raise DistlabError(f"tau={tau} must lie in [0, 1]")
    tgt = list(target.parameters()) if isinstance(target, nn.Module) else list(target)
    src = list(source.parameters()) if isinstance(source, nn.Module) else list(source)
    if len(tgt) != len(src):
        raise DistlabError(f"soft update between models of {len(src)} and {len(tgt)} parameter tensors")
    by_device: dict[tuple[torch.device, torch.dtype], tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
    for t, s in zip(tgt, src):
        if t.shape != s.shape:
            raise DistlabError(f"soft update: shapes differ ({tuple(s.shape)} -> {tuple(t.shape)})")
        group = by_device.setdefault((t.device, t.dtype), ([], []))
        group[0].append(t.data)
        # a device -> host copy must be complete before the CPU reads it, so only host -> device is async
        if not _is_dtensor(t):  # a plain target (a target critic) follows a sharded source gathered whole
            s = full_tensor(s)
        group[1].append(s.detach().to(t.device, t.dtype, non_blocking=t.device.type == "cuda"))
    for ts, ss in by_device.values():
        torch._foreach_lerp_(ts, ss, tau)


def _is_dtensor(x: torch.Tensor) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(x, DTensor)
