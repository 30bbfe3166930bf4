"""``distlab train``: validate in this process, then start the ranks with ``torch.distributed.run``.

Validation happens before any worker exists, so a typo costs a second, not a cluster allocation.
If this process is already one rank of a job (torchrun, srun, accelerate launch) it simply becomes
the worker.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from distlab.dist import detect_env, port_is_free
from distlab.errors import DistlabError
from distlab.recipe import load_recipe
from distlab.config import finalize_config, resolve_config
from distlab.wrap import check_gpus_available


@dataclass
class LaunchOptions:
    gpus: int | None = None
    procs: int | None = None
    nodes: int = 1
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    max_restarts: int = 0
    rdzv_backend: str | None = None


def world_plan(opts: LaunchOptions) -> tuple[int, list[str]]:
    """Processes per node and the overrides that pin the device type for that choice."""
    if opts.gpus is not None and opts.procs is not None:
        raise DistlabError("use either --gpus (CUDA, NCCL) or --procs (CPU, gloo), not both")
    if opts.procs is not None:
        if opts.procs < 1:
            raise DistlabError(f"--procs {opts.procs} must be 1 or more")
        return opts.procs, ["dist.device=cpu", "dist.backend=gloo"]
    if opts.gpus == 0:  # the seed scripts' --num_gpus 0: one process on the CPU
        return 1, ["dist.device=cpu"]
    if opts.gpus is not None:
        return check_gpus_available(opts.gpus), ["dist.device=cuda"]
    return 1, []


def torchrun_args(nproc: int, opts: LaunchOptions, worker_args: list[str]) -> list[str]:
    args = [f"--nproc-per-node={nproc}", f"--nnodes={opts.nodes}", f"--max-restarts={opts.max_restarts}"]
    if opts.nodes == 1 and not opts.master_addr:
        args.append("--standalone")
    else:
        addr = opts.master_addr or "127.0.0.1"
        port = opts.master_port or 29500
        args += [f"--node-rank={opts.node_rank}", f"--master-addr={addr}", f"--master-port={port}"]
        if opts.rdzv_backend:
            args += [f"--rdzv-backend={opts.rdzv_backend}", f"--rdzv-endpoint={addr}:{port}"]
    return args + ["--module", "distlab.worker", *worker_args]


def preflight(recipe_name: str, presets: list[str], overrides: list[str], world_size: int,
              procs_per_node: int | None = None):
    """Everything that can be checked before starting processes: schema, types, placement, data, divisibility."""
    from distlab.placement import check_config

    recipe = load_recipe(recipe_name)
    cfg = resolve_config(recipe, presets, overrides)
    cfg, _ = finalize_config(recipe, cfg, world_size)
    check_config(cfg, procs_per_node or world_size, _visible_gpus())
    if recipe.validate is not None:
        recipe.validate(cfg, world_size)
    return recipe, cfg


def _visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def ranks_per_node(nproc: int, opts: LaunchOptions, recipe_name: str, presets: list[str], overrides: list[str]
                   ) -> int:
    """With ``--gpus N`` and ``dist.devices_per_rank=K`` a node runs N/K ranks of K GPUs each."""
    if opts.gpus is None or opts.gpus == 0:
        return nproc
    k = resolve_config(load_recipe(recipe_name), presets, overrides).dist.devices_per_rank
    if k < 1 or nproc % k:
        raise DistlabError(f"--gpus {nproc} is not a multiple of dist.devices_per_rank={k}; use --gpus "
                           f"{max(k, nproc - nproc % k) if k >= 1 else 1}")
    return nproc // k


def train(recipe_name: str, presets: list[str], overrides: list[str], opts: LaunchOptions,
          eval_checkpoint: Path | None = None, eval_output: Path | None = None) -> int:
    """Start the ranks of a training run (or, with ``eval_checkpoint``, of an evaluation)."""
    from distlab import worker

    if detect_env().launcher != "single":  # already a rank of somebody else's launcher
        return worker.main(worker.worker_argv(recipe_name, presets, overrides, eval_checkpoint,
                                                      eval_output))
    nproc, pinned = world_plan(opts)
    overrides = [*pinned, *overrides]
    nproc = ranks_per_node(nproc, opts, recipe_name, presets, overrides)
    recipe, cfg = preflight(recipe_name, presets, overrides, nproc * opts.nodes, nproc)
    # the run name is fixed here so that every restart (and every node) lands in the same directory
    overrides = [*overrides, f"run.name={cfg.run.name}"]
    os.environ["DISTLAB_CMDLINE"] = shlex.join(["distlab", *sys.argv[1:]])
    worker_args = worker.worker_argv(recipe_name, presets, overrides, eval_checkpoint, eval_output)
    if nproc * opts.nodes == 1 and opts.max_restarts == 0:
        return worker.main(worker_args)
    if opts.master_port and opts.nodes == 1 and not port_is_free(opts.master_port):
        raise DistlabError(f"MASTER_PORT {opts.master_port} is busy; pick another --master-port")
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser
    from torch.distributed.run import run as torchrun

    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    args = get_args_parser().parse_args(torchrun_args(nproc, opts, worker_args))
    try:
        torchrun(args)
    except ChildFailedError as exc:
        rank, failure = next(iter(exc.failures.items()))
        raise DistlabError(f"rank {rank} exited with code {failure.exitcode}; see {cfg.run.dir}/{cfg.run.name}/"
                           f"rank{rank}.log") from None
    return 0
