"""``distlab slurm RECIPE ...``: one sbatch script for one training command.

The script starts ``distlab train --gpus N`` (``--procs 1`` on a CPU node) on one node, or that launcher once
per node through ``srun`` (several nodes), forwards SLURM's warning signal so every rank checkpoints, and
requeues the job, which resumes from the run's latest checkpoint. Arguments given to ``sbatch script.sh`` are
appended as further overrides (``sbatch train.sh lr=1e-5``), the way the GRPO seed's submission script took them.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from pathlib import Path

from distlab.errors import DistlabError
from distlab.suite.slurm import (CPUS_PER_GPU, MEM_PER_GPU, SbatchOptions, _setup, _validate, check_setup,
                                 launch_plan, node_resources, render_script)


def write_job_script(recipe: str, presets: list[str], overrides: list[str], out: Path, *, gpus: int, nodes: int,
                     time: str, cpus: int | None = None, mem: str | None = None, partition: str | None = None,
                     account: str | None = None, python: str = "python", setup: Sequence[str] = (),
                     cpus_per_gpu: int = CPUS_PER_GPU, mem_per_gpu: str = MEM_PER_GPU) -> Path:
    """Validate the training config here (so a typo fails now, not in the queue), then write the script."""
    from distlab.launch.launcher import preflight

    plan = launch_plan(python, nodes, gpus)
    cpus, mem = node_resources(gpus, plan.procs, cpus, mem, cpus_per_gpu, mem_per_gpu)
    _validate(gpus, nodes, cpus, mem, time, 120)
    check_setup(setup)
    _, cfg = preflight(recipe, presets, list(overrides), plan.procs * nodes, plan.procs)
    name = cfg.run.name
    flags = [x for p in presets for x in ("--config", p)]
    cmd = plan.train_argv(["train", recipe, *flags, *overrides, f"run.name={name}"])
    log_dir = Path("slurm_logs")
    opts = SbatchOptions(job_name=f"distlab-{name}"[:64], nodes=nodes, gpus_per_node=gpus, cpus_per_task=cpus,
                         mem=mem, time=time, output=str(log_dir / f"{name}-%j.out"), partition=partition,
                         account=account)
    about = [f"run: {name} ({recipe}; presets: {', '.join(presets) or 'none'}; overrides as in CMD below)",
             plan.describe(nodes)]
    extra = _setup(nodes) + '\nCMD+=("$@")  # sbatch script.sh key=value ... adds overrides'
    text = render_script(opts, [cmd], launcher=plan.launcher, setup=extra,
                         done_files=[str(Path(cfg.run.dir) / name / "summary.json")], python=python,
                         env_setup=setup, about=about)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.chmod(0o755)
    (out.parent / log_dir).mkdir(exist_ok=True)
    return out


def add_node_options(p) -> None:
    """The per-node options ``distlab slurm`` and ``distlab suite slurm`` share."""
    p.add_argument("--cpus-per-task", type=int, help="CPUs of each node's task (default: --cpus-per-gpu x "
                                                     "GPUs; on CPU nodes 4 per process)")
    p.add_argument("--mem", help="memory per node, e.g. 256G (default: --mem-per-gpu x GPUs; 8G per process "
                                 "on CPU nodes)")
    p.add_argument("--cpus-per-gpu", type=int, help=f"CPUs asked per GPU (default {CPUS_PER_GPU})")
    p.add_argument("--mem-per-gpu", help=f"memory asked per GPU (default {MEM_PER_GPU})")
    p.add_argument("--setup", action="append", metavar="BASH",
                   help="bash run on the node before training, e.g. 'source venv/bin/activate' or 'module load "
                        "cuda' (repeatable; a failing line stops the job)")


def per_gpu(a: argparse.Namespace) -> dict:
    """``setup``, ``cpus_per_gpu`` and ``mem_per_gpu`` keywords from the parsed :func:`add_node_options`."""
    return {"setup": a.setup or (),
            "cpus_per_gpu": CPUS_PER_GPU if a.cpus_per_gpu is None else a.cpus_per_gpu,
            "mem_per_gpu": MEM_PER_GPU if a.mem_per_gpu is None else a.mem_per_gpu}


def register(subparsers) -> None:
    p = subparsers.add_parser("slurm", help="write an sbatch script for one training run: distlab slurm RECIPE "
                                            "key=value ... --gpus N --nodes M --time 12:00:00")
    p.add_argument("recipe")
    p.add_argument("--config", action="append", default=[], help="preset name or YAML file (repeatable)")
    p.add_argument("--gpus", type=int, default=1, help="GPUs per node (0: CPU job)")
    p.add_argument("--nodes", type=int, default=1, help="nodes; each runs one launcher, started by srun")
    add_node_options(p)
    p.add_argument("--time", default="12:00:00")
    p.add_argument("--partition")
    p.add_argument("--account")
    p.add_argument("--python", default="python", help="interpreter on the cluster nodes (after --setup)")
    p.add_argument("-o", "--output", default=None, help="script path (default: slurm_scripts/<run name>.sh)")
    p.set_defaults(func=_cmd)


def _cmd(a: argparse.Namespace, extra: list[str]) -> int:
    bad = [e for e in extra if "=" not in e]
    if bad:
        raise DistlabError(f"unexpected arguments {' '.join(bad)}; overrides are key=value")
    out = Path(a.output) if a.output else None
    if out is None:
        from distlab.config import finalize_config, resolve_config
        from distlab.recipe import load_recipe

        recipe = load_recipe(a.recipe)
        cfg, _ = finalize_config(recipe, resolve_config(recipe, a.config, extra), max(a.gpus, 1) * a.nodes)
        out = Path("slurm_scripts") / f"{cfg.run.name}.sh"
    path = write_job_script(a.recipe, a.config, extra, out, gpus=a.gpus, nodes=a.nodes, cpus=a.cpus_per_task,
                            mem=a.mem, time=a.time, partition=a.partition, account=a.account, python=a.python,
                            **per_gpu(a))
    print(f"wrote {path}; submit with: sbatch {shlex.quote(str(path))} [key=value ...]")
    return 0
