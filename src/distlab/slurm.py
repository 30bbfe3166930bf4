"""``distlab slurm RECIPE ...``: one sbatch script for one training command.

The script starts ``distlab train`` (one node) or torchrun through ``srun`` (several nodes), forwards
SLURM's warning signal so every rank checkpoints, and requeues the job, which resumes from the run's
latest checkpoint. Arguments given to ``sbatch script.sh`` are appended as further overrides
(``sbatch train.sh lr=1e-5``), the way the GRPO seed's submission script took them.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from distlab.errors import DistlabError
from distlab.suite.slurm import SbatchOptions, _launcher, _setup, _validate, render_script


def write_job_script(recipe: str, presets: list[str], overrides: list[str], out: Path, *, gpus: int, nodes: int,
                     cpus: int, mem: str, time: str, partition: str | None = None, account: str | None = None,
                     python: str = "python") -> Path:
    """Validate the training config here (so a typo fails now, not in the queue), then write the script."""
    from distlab.launch import preflight

    _validate(gpus, nodes, cpus, mem, time, 120)
    procs = max(gpus, 1)
    _, cfg = preflight(recipe, presets, list(overrides), procs * nodes, procs)
    name = cfg.run.name
    flags = [x for p in presets for x in ("--config", p)]
    cmd = ["train", recipe, *flags, *overrides, f"run.name={name}"]
    if nodes == 1:
        cmd += ["--gpus", str(gpus)] if gpus > 0 else []
    log_dir = Path("slurm_logs")
    opts = SbatchOptions(job_name=f"distlab-{name}"[:64], nodes=nodes, gpus_per_node=gpus, cpus_per_task=cpus,
                         mem=mem, time=time, output=str(log_dir / f"{name}-%j.out"), partition=partition,
                         account=account)
    setup = _setup(nodes) + '\nCMD+=("$@")  # sbatch script.sh key=value ... adds overrides'
    text = render_script(opts, [cmd], launcher=_launcher(python, nodes, procs), setup=setup,
                         done_files=[str(Path(cfg.run.dir) / name / "summary.json")], python=python)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.chmod(0o755)
    (out.parent / log_dir).mkdir(exist_ok=True)
    return out


def register(subparsers) -> None:
    p = subparsers.add_parser("slurm", help="write an sbatch script for one training run: distlab slurm RECIPE "
                                            "key=value ... --gpus N --nodes M --time 12:00:00")
    p.add_argument("recipe")
    p.add_argument("--config", action="append", default=[], help="preset name or YAML file (repeatable)")
    p.add_argument("--gpus", type=int, default=1, help="GPUs per node (0: CPU job)")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--cpus-per-task", type=int, default=8)
    p.add_argument("--mem", default="64G")
    p.add_argument("--time", default="12:00:00")
    p.add_argument("--partition")
    p.add_argument("--account")
    p.add_argument("--python", default="python", help="interpreter on the cluster nodes")
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
                            mem=a.mem, time=a.time, partition=a.partition, account=a.account, python=a.python)
    print(f"wrote {path}; submit with: sbatch {shlex.quote(str(path))} [key=value ...]")
    return 0
