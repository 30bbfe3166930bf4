"""The doctor's checks put together: the report object, its exit code, and the command's entry point.

Kept apart from :mod:`distlab.doctor` (which only registers the command) because it imports torch,
and ``distlab --help`` must not pay for that.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from distlab.doctor import checks
from distlab.doctor.bandwidth import run_allreduce, sizes_up_to
from distlab.errors import DistlabError
from distlab.memory.plan import find_scaling_file, plan_devices, plan_memory, speedup_estimates
from distlab.recipe import ModelSpec
from distlab.run.logs import Progress, phase_progress

# Warnings alone exit 0 (see distlab.doctor's docstring); EXIT_WARN stays as a name for scripts that import it.
EXIT_OK, EXIT_WARN, EXIT_ERROR = 0, 0, 3
REPORT_KEYS = ("schema", "versions", "host", "gpus", "topology", "bandwidth", "memory", "speedup",
               "findings", "recommendations", "exit_code")


def _validate(bandwidth_mb: int, procs: int, timeout_s: float) -> None:
    if bandwidth_mb < 1:
        raise DistlabError(f"--bandwidth-mb must be >= 1 (MiB of the largest message), got {bandwidth_mb}")
    if procs < 2:
        raise DistlabError(f"--procs must be >= 2 (an all-reduce needs two processes), got {procs}")
    if timeout_s <= 0:
        raise DistlabError(f"--timeout must be > 0 seconds, got {timeout_s}")


def _bandwidth(enabled: bool, n_gpus: int, nccl_ok: bool, procs: int, bandwidth_mb: int,
               timeout_s: float) -> dict[str, Any]:
    """NCCL across the GPUs when there are two or more, otherwise gloo across CPU processes."""
    if n_gpus >= 2 and nccl_ok:
        backend, world = "nccl", n_gpus
    else:
        backend, world = "gloo", procs
    if not enabled:
        return {"backend": backend, "world_size": world, "device": "cuda" if backend == "nccl" else "cpu",
                "status": "skipped", "detail": "--no-bandwidth", "results": []}
    return run_allreduce(backend, world, sizes_up_to(bandwidth_mb), timeout_s=timeout_s)


def memory_plan(model: ModelSpec | list[ModelSpec] | None, gpus: list[dict[str, Any]], host: dict[str, Any],
                 procs: int) -> dict[str, Any] | None:
    """Size against the tightest GPU, or against RAM shared by the CPU ranks; per device for several models."""
    if model is None:
        return None
    if isinstance(model, list):
        free = {g["index"]: g["free_bytes"] for g in gpus}
        return plan_devices(model, free, host["ram_available_bytes"] or 0, max(1, len(gpus)) if gpus else procs)
    if gpus:
        tight = min(gpus, key=lambda g: g["free_bytes"])
        return plan_memory(model, capacity_bytes=tight["free_bytes"], world_size=len(gpus),
                           device=f"GPU {tight['index']} ({tight['name']}, least free)")
    ram = host["ram_available_bytes"] or 0
    return plan_memory(model, capacity_bytes=ram // procs, world_size=procs,
                       device="CPU RAM of 1 process" if procs == 1 else f"CPU RAM shared by {procs} processes")


def _speedup(scaling_file: Path | None) -> tuple[dict[str, Any], list[checks.Finding]]:
    """A file the user named must be valid (error); a broken auto-found one is only reported."""
    if scaling_file is not None:
        return speedup_estimates(scaling_file), []
    found = find_scaling_file()
    try:
        return speedup_estimates(found), []
    except DistlabError as exc:
        empty = speedup_estimates(None)
        return empty, [checks.Finding("warn", "scaling_file_invalid", str(exc),
                                      f"delete or regenerate {found} with `distlab bench scaling`")]


def _exit_code(findings: list[checks.Finding]) -> int:
    """Errors fail the command; warnings are advice and leave it at 0."""
    return EXIT_ERROR if any(f.severity == "error" for f in findings) else EXIT_OK


def collect_report(*, bandwidth: bool = True, model: ModelSpec | None = None, scaling_file: Path | None = None,
                   procs: int = 2, bandwidth_mb: int = 64, timeout_s: float = 60.0,
                   env: Mapping[str, str] | None = None, train_procs: int | None = None,
                   progress: Progress | None = None) -> dict[str, Any]:
    """Run every check and return the report object that ``--json`` prints.

    ``procs`` CPU processes run the all-reduce test; ``train_procs`` (default ``procs``) is the number the
    training will use on CPU, so the memory plan and the advice describe that run and not the test's.
    ``progress`` (see :func:`probes_progress`) is told each probe as it starts.
    """
    _validate(bandwidth_mb, procs, timeout_s)
    train_procs = procs if train_procs is None else max(1, train_procs)
    env = os.environ if env is None else env
    bar = progress or Progress(len(PROBES), enabled=False)
    _probe(bar, "versions and host")
    versions = checks.collect_versions()
    host = checks.collect_host()
    physical = checks.physical_gpu_count()
    cuda_ok = torch.cuda.is_available()
    _probe(bar, "GPUs")
    probe = checks.probe_gpus(timeout_s)
    gpus = probe["gpus"]
    topology = {"p2p": probe["p2p"], **checks.nvidia_topology()}
    findings = checks.check_torch_build(versions, cuda_ok, physical)
    if probe["error"]:
        findings.append(checks.Finding("error", "gpu_probe_failed", f"probing the GPUs failed: {probe['error']}",
                                       "run `nvidia-smi`; a hung or crashed driver needs a reset or reboot"))
    ranks = checks.world_size_for(len(gpus), train_procs)
    findings += checks.check_backends(versions, len(gpus))
    findings += checks.check_cuda_visible_devices(env, len(gpus), physical)
    findings += checks.check_master_port(env)
    findings += checks.check_shm(host["shm_bytes"])
    findings += checks.check_nccl_env(env, len(gpus), host["infiniband"])
    findings += checks.check_omp(env, ranks, host["cpu_count"], host["torch_threads"])
    findings += checks.check_gpus(gpus)
    findings += checks.check_p2p(probe["p2p"])
    _probe(bar, "all-reduce bandwidth")
    bw = _bandwidth(bandwidth, len(gpus), versions["nccl_available"], procs, bandwidth_mb, timeout_s)
    findings += checks.check_bandwidth(bw)
    _probe(bar, "memory plan")
    memory = memory_plan(model, gpus, host, train_procs)
    findings += checks.check_memory(memory)
    speedup, problem = _speedup(scaling_file)
    findings += problem
    findings.sort(key=lambda f: checks.SEVERITIES.index(f.severity))
    bar.update(bar.total, now="done")
    return {
        "schema": 1, "versions": versions, "host": host, "gpus": gpus, "topology": topology,
        "bandwidth": bw, "memory": memory, "speedup": speedup,
        "findings": [f.to_dict() for f in findings],
        "recommendations": checks.recommendations(findings, len(gpus), train_procs, memory),
        "exit_code": _exit_code(findings),
    }


def run_doctor(*, json_out: bool, bandwidth: bool = True, model: ModelSpec | None = None,
               scaling_file: Path | None = None, procs: int = 2, bandwidth_mb: int = 64,
               timeout_s: float = 60.0, train_procs: int | None = None, progress: Progress | None = None) -> int:
    """Print the report (rich, or one JSON object) and return the exit code described above."""
    with progress or probes_progress(recipe=False) as bar:
        report = collect_report(bandwidth=bandwidth, model=model, scaling_file=scaling_file, procs=procs,
                                bandwidth_mb=bandwidth_mb, timeout_s=timeout_s, train_procs=train_procs,
                                progress=bar)
    if json_out:
        print(json.dumps(report, indent=2))
    else:
        from distlab.doctor.render import render

        render(report)
    return report["exit_code"]


def recipe_model_spec(recipe_name: str, overrides: list[str], presets: list[str], world_size: int = 1
                      ) -> ModelSpec | list[ModelSpec]:
    """The memory model of a recipe config, so the estimate matches what ``train`` would build; the config passes
    the same checks ``train`` makes first, so a setting train refuses is refused here in the same line."""
    from distlab.launch.launcher import preflight
    from distlab.memory.estimate import recipe_specs
    from distlab.recipe import load_recipe

    recipe = load_recipe(recipe_name)
    if recipe.model_spec is None:
        raise DistlabError(f"recipe '{recipe_name}' gives no memory model; run doctor without --recipe")
    recipe, cfg = preflight(recipe_name, presets, overrides, world_size, any_machine=True)
    return recipe_specs(recipe, cfg)


def run_from_args(args: argparse.Namespace, extra: list[str] | None = None, model: ModelSpec | None = None) -> int:
    """Entry point for the parsed ``doctor`` subcommand; ``--recipe`` plus overrides size a model."""
    if args.procs is not None and args.procs < 1:
        raise DistlabError(f"--procs {args.procs}: the planned run needs 1 or more processes, e.g. --procs 2")
    if getattr(args, "recipe", None) == "":
        raise DistlabError("--recipe is empty; name a recipe, e.g. --recipe grpo (distlab --help lists them)")
    if getattr(args, "recipe", None):
        bad = [e for e in extra or [] if "=" not in e]
        if bad:
            raise DistlabError(f"unexpected arguments {' '.join(bad)}; doctor takes key=value overrides after --recipe")
    # The advice is about the run being planned: `distlab train R` without --procs is one process, so a
    # --recipe check without --procs is too; the all-reduce test always needs at least two.
    train_procs = args.procs if args.procs is not None else (1 if getattr(args, "recipe", None) else 2)
    if extra and not getattr(args, "recipe", None):
        raise DistlabError(f"unexpected arguments {' '.join(extra)}; overrides need --recipe NAME")
    progress = probes_progress(recipe=bool(getattr(args, "recipe", None)))
    if getattr(args, "recipe", None):
        _probe(progress, f"{args.recipe}'s models and tokenizer")
        model = recipe_model_spec(args.recipe, list(extra or []), args.config, train_procs)
    return run_doctor(json_out=args.json_out, bandwidth=args.bandwidth, model=model,
                      scaling_file=args.scaling_file, procs=max(2, train_procs), bandwidth_mb=args.bandwidth_mb,
                      timeout_s=args.timeout, train_procs=train_procs, progress=progress)


# The probes collect_report runs, in order; a --recipe check reads the recipe's models first (a GGUF's metadata and
# a tokenizer: tens of seconds on a busy CPU). Each can take long (a hung driver, a slow all-reduce), so the
# doctor shows them as one phase whose progress names the probe under way.
PROBES = ("versions and host", "GPUs", "all-reduce bandwidth", "memory plan")


def probes_progress(recipe: bool) -> Progress:
    """The doctor's progress over its probes (stderr: ``--json`` keeps stdout for the report)."""
    return phase_progress("doctor", len(PROBES) + int(recipe), "probe", every_s=0.0)  # a line per probe: they are few


def _probe(bar: Progress, name: str) -> None:
    """Count the probes done so far and name the one starting (shown once the doctor has run a few seconds)."""
    bar.update(bar.done + (1 if bar.fields else 0), now=name)
