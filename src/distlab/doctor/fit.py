"""The doctor's memory verdict, applied by ``train`` (and ``eval``, and every run of ``suite run``) before a run
starts: a run the doctor says cannot fit is refused in one line, before its run directory exists, instead of
dying later in an allocator with a directory behind it. ``--force`` starts it anyway.

The numbers are the doctor's own (:func:`distlab.doctor.report.memory_plan` and
:func:`distlab.doctor.checks.check_memory`, the same estimate ``distlab doctor --recipe`` prints), against the
capacity of this machine: available RAM shared by the CPU processes, or the free memory of the GPUs the run will
use. Only a doctor *error* refuses (the estimate is a lower bound); advice such as a smaller batch is not enforced.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from distlab.errors import DistlabError

log = logging.getLogger("distlab")

GIB = 1024**3
# A GPU run whose every device needs less than this is not probed: the probe starts CUDA in a child (seconds),
# and no GPU this code runs on has less free than this while idle
SMALL_GPU_BYTES = 1 * GIB


@dataclasses.dataclass(frozen=True)
class Target:
    """Where the run will live: ``procs`` processes on this node, on GPUs (``gpus`` of them) or the CPU."""

    procs: int
    gpus: int = 0  # GPUs of this node the run uses; 0: a CPU run

    @property
    def on_gpu(self) -> bool:
        return self.gpus > 0


def check_launch(recipe: Any, cfg: Any, presets: list[str], overrides: list[str], nproc: int, opts: Any,
                 evaluating: bool = False) -> None:
    """:func:`check_fits` for this node's share of a ``train``/``eval`` launch (``launch.train``'s memory_check):
    ``nproc`` ranks on the GPUs they will drive, or on the CPU; ``opts.force`` turns a refusal into a warning."""
    import torch

    device = cfg.dist.device
    on_gpu = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    target = Target(nproc, nproc * max(1, cfg.dist.devices_per_rank) if on_gpu else 0)
    check_fits(recipe, cfg, presets, overrides, nproc * opts.nodes, target, evaluating=evaluating, force=opts.force)


def check_fits(recipe: Any, cfg: Any, presets: list[str], overrides: list[str], world_size: int, target: Target,
               *, evaluating: bool = False, force: bool = False) -> None:
    """Refuse (one-line DistlabError) a run the doctor says cannot fit here, naming the estimate, the capacity and
    the setting that shrinks it most; with ``force`` only warn. An evaluation counts weights alone (no gradients,
    optimizer states or training activations), so only a checkpoint that cannot even be loaded is refused."""
    from distlab.doctor.checks import check_memory
    from distlab.memory.estimate import recipe_specs

    specs = recipe_specs(recipe, cfg)
    if specs is None:
        return
    if evaluating:
        specs = _weights_only(specs)
    capacity = _capacity(specs, target)
    if capacity is None:
        return
    plan = _plan(specs, capacity, target)
    findings = check_memory(plan)
    errors = [f for f in findings if f.severity == "error"]
    if not errors:  # the doctor's advice (a smaller batch, FSDP) is said, not enforced: see the module doc
        for f in findings:
            log.warning("memory: %s (the doctor's estimate); %s", f.message, f.fix)
        return
    what = "; ".join(f.message for f in errors) + " (the doctor's estimate)"
    if force:
        log.warning("%s; --force: starting anyway", what)
        return
    fix = None if evaluating else _best_setting(recipe, presets, overrides, world_size, capacity, target,
                                                _need(plan))
    if fix is None:
        advice = errors[0].fix
    else:
        setting, need, fits = fix
        advice = f"{setting} shrinks it most, to {need / GIB:.2f} GiB" + ("" if fits else " (still too much)")
    raise DistlabError(f"{what}; {advice}; add --force to start it anyway")


def _weights_only(specs: Any) -> Any:
    def frozen(s: Any) -> Any:
        return dataclasses.replace(s, trainable_params=0, optimizer="none", activation_bytes_per_example=0)

    return [frozen(s) for s in specs] if isinstance(specs, list) else frozen(specs)


def _capacity(specs: Any, target: Target) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    """``(gpus, host)`` as the doctor's report holds them, or None where nothing can be told (no RAM figure, a
    failed GPU probe) or nothing need be (a small GPU run)."""
    host = {"ram_available_bytes": ram_available()}
    if not target.on_gpu:
        return ([], host) if host["ram_available_bytes"] is not None else None
    if _need(_plan(specs, ([], {"ram_available_bytes": 0}), Target(target.procs))) < SMALL_GPU_BYTES:
        return None
    from distlab.doctor.checks import probe_gpus

    probe = probe_gpus()
    gpus = probe["gpus"][:target.gpus]
    return (gpus, host) if gpus and not probe["error"] else None


def ram_available() -> int | None:
    """The doctor's RAM figure (:func:`distlab.memory.host.available_bytes`), looked up at each call."""
    from distlab.memory.host import available_bytes

    return available_bytes()


def _plan(specs: Any, capacity: tuple[list[dict[str, Any]], dict[str, Any]], target: Target) -> dict[str, Any]:
    from distlab.doctor.report import memory_plan

    gpus, host = capacity
    return memory_plan(specs, gpus, host, target.procs)


def _need(plan: dict[str, Any]) -> int:
    """Bytes on the fullest device: what a setting must bring down."""
    if "per_device" in plan:
        return max(row["total"] for row in plan["per_device"])
    totals = [plan["ddp"]["total"]] + ([plan["fsdp"]["total"]] if plan["world_size"] > 1 else [])
    return min(totals)


def _best_setting(recipe: Any, presets: list[str], overrides: list[str], world_size: int,
                  capacity: tuple[list[dict[str, Any]], dict[str, Any]], target: Target,
                  need: int) -> tuple[str, int, bool] | None:
    """``(override, bytes needed with it, whether it then fits)`` of the candidate that needs least, among the
    memory settings this recipe's config has; None if none of them shrinks the estimate."""
    from distlab.config import finalize_config, resolve_config
    from distlab.doctor.checks import check_memory
    from distlab.memory.estimate import recipe_specs

    cfg = resolve_config(recipe, presets, overrides)
    best = None
    for setting in candidates(recipe, cfg, target):
        try:
            tried, _ = finalize_config(recipe, resolve_config(recipe, presets, [*overrides, setting]), world_size)
            plan = _plan(recipe_specs(recipe, tried), capacity, target)
        except DistlabError:  # not a value this recipe takes with the rest of the config
            continue
        now = _need(plan)
        if now < need and (best is None or now < best[1]):
            best = (setting, now, not any(f.severity == "error" for f in check_memory(plan)))
    return best


def candidates(recipe: Any, cfg: Any, target: Target) -> list[str]:
    """Overrides that shrink memory without changing what is trained, where the config has the key and the recipe
    acts on it: Adam's moments in int8, recomputed activations, FSDP2's host offload (sharded GPU runs), half of
    each batch key (the global batch: fewer examples per step), one sequence per LM micro-batch, LoRA for a full
    LM fine-tune (trains an adapter instead: named, never applied)."""
    from distlab.config import OPTIONAL_CORE_KEYS

    def has(key: str) -> bool:
        node = cfg
        for part in key.split("."):
            if not hasattr(node, part):
                return False
            node = getattr(node, part)
        return recipe.supports is None or key not in OPTIONAL_CORE_KEYS or key in recipe.supports

    out = []
    if has("optim.state_dtype") and cfg.optim.state_dtype != "int8":
        out.append("optim.state_dtype=int8")
    if has("dist.activation_checkpointing") and cfg.dist.activation_checkpointing == "none":
        out.append("dist.activation_checkpointing=blocks")
    if target.on_gpu and has("dist.cpu_offload") and not cfg.dist.cpu_offload and cfg.dist.wrap == "fsdp":
        out.append("dist.cpu_offload=true")
    for key in recipe.batch_keys:
        value = getattr(cfg, key, None)
        if isinstance(value, int) and value >= 2:
            out.append(f"{key}={value // 2}")
    if has("micro_batch_size") and isinstance(cfg.micro_batch_size, int) and cfg.micro_batch_size > 1:
        out.append("micro_batch_size=1")
    if has("model.lora_r") and cfg.model.lora_r <= 0:
        out.append("model.lora_r=16")
    return out
