"""SLURM batch scripts for a suite: one job array per experiment (one task per seed), preemption-safe.

Time limits and preemption are the normal way long runs end on shared clusters, so every script is built to
survive them: SLURM sends the batch shell SIGUSR1 ``signal_s`` seconds early (``--signal=B:USR1@N``), the
shell forwards it to the training processes, the trainer checkpoints at the next step boundary and exits with
:data:`REQUEUE_EXIT_CODE`, and the shell requeues the job. The requeued job runs the very same command, and
the trainer resumes from the newest checkpoint in its ``run.dir``.
"""

from __future__ import annotations


import os
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from distlab.errors import DistlabError
from distlab.suite.document import atomic_write_text
from distlab.suite.spec import Suite

REQUEUE_EXIT_CODE = 75  # EX_TEMPFAIL: "checkpointed because asked to stop; run me again"
_TIME_RE = re.compile(r"^(\d+-\d+(:\d{1,2}){0,2}|\d+(:\d{1,2}){0,2}|infinite|unlimited)$", re.I)
_MEM_RE = re.compile(r"^\d+[KMGT]?$")
TORCHRUN_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
# per-GPU (per-process on CPU nodes) defaults of --cpus-per-task and --mem: an 8-GPU job asks 64 CPUs, 256G
CPUS_PER_GPU = 8
MEM_PER_GPU = "32G"
CPUS_PER_PROC = 4
MEM_PER_PROC = "8G"


@dataclass(frozen=True)
class SbatchOptions:
    """The ``#SBATCH`` header of one job (array)."""

    job_name: str
    nodes: int = 1
    gpus_per_node: int = 0
    cpus_per_task: int = 1
    mem: str = "4G"
    time: str = "01:00:00"
    array_size: int = 1
    output: str | None = None
    partition: str | None = None
    account: str | None = None
    workdir: str | None = None
    requeue: bool = True
    signal_s: int = 120
    extra: tuple[str, ...] = ()


@dataclass(frozen=True)
class SlurmBundle:
    """What :func:`write_slurm_scripts` wrote."""

    scripts: list[Path]
    submit_all: Path
    log_dir: Path


def write_slurm_scripts(suite: Suite, out_dir: str | os.PathLike, *, gpus_per_node: int, nodes: int,
                        time: str, seeds: int | Iterable[int], cpus_per_task: int | None = None,
                        mem: str | None = None, partition: str | None = None, account: str | None = None,
                        extra_sbatch: Sequence[str] = (), scale: str | None = None, python: str = "python",
                        requeue: bool = True, signal_s: int = 120, procs_per_node: int | None = None,
                        results_root: str = "experiment_results", workdir: str | None = None,
                        setup: Sequence[str] = (), cpus_per_gpu: int = CPUS_PER_GPU,
                        mem_per_gpu: str = MEM_PER_GPU, force: bool = False) -> SlurmBundle:
    """One ``<experiment>.sbatch`` per experiment (seeds = array tasks) and an executable ``submit_all.sh``.

    Jobs run in the directory ``submit_all.sh`` is called from (or ``workdir``), where ``run.dir`` paths
    (``<results_root>/<suite>/<exp>/seed<k>``) are created. GPU nodes run ``distlab train ... --gpus N`` (NCCL),
    CPU nodes ``--procs N`` (gloo); several nodes start one such launcher per node through ``srun``
    (:func:`launch_plan`). ``cpus_per_task``/``mem`` default to per-GPU (per-process on CPU) amounts. ``force``
    adds ``--force`` to every ``train``: the doctor's memory check runs on the node and would refuse there.
    """
    plan = launch_plan(python, nodes, gpus_per_node, procs_per_node)
    if force:
        plan = replace(plan, flags=(*plan.flags, "--force"))
    cpus, mem = node_resources(gpus_per_node, plan.procs, cpus_per_task, mem, cpus_per_gpu, mem_per_gpu)
    _validate(gpus_per_node, nodes, cpus, mem, time, signal_s)
    check_setup(setup)
    specs = suite.runs(seeds, scale=scale, root=results_root)  # a bad seed list or scale fails before any write
    out = Path(out_dir).resolve()
    log_dir = out / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    about = [scale_line(suite, scale), plan.describe(nodes)]
    scripts = []
    for exp in suite.experiments:
        runs = [r for r in specs if r.experiment == exp]
        opts = SbatchOptions(job_name=f"{suite.name}-{exp}", nodes=nodes, gpus_per_node=gpus_per_node,
                             cpus_per_task=cpus, mem=mem, time=time, array_size=len(runs),
                             output=str(log_dir / "%x_%A_%a.out"), partition=partition, account=account,
                             workdir=workdir, requeue=requeue, signal_s=signal_s, extra=tuple(extra_sbatch))
        commands = [plan.train_argv(r.argv(suite.recipe)) for r in runs]
        path = out / f"{exp}.sbatch"
        done = [str(r.out_dir / "summary.json") for r in runs]
        atomic_write_text(path, render_script(opts, commands, plan.launcher, setup=_setup(nodes), done_files=done,
                                              python=python, env_setup=setup, about=about))
        path.chmod(0o755)
        scripts.append(path)
    submit = out / "submit_all.sh"
    atomic_write_text(submit, render_submit_all(suite.name, scripts, log_dir))
    submit.chmod(0o755)
    return SlurmBundle(scripts, submit, log_dir)


def scale_line(suite: Suite, scale: str | None) -> str:
    """The size the runs train at, said in the script: full-size settings are hours per run on a GPU node, and
    a user who meant ``--smoke`` or ``--scale h200`` should see that before submitting, not after."""
    others = ", ".join(f"--scale {s}" for s in suite.scales)
    if scale is None:
        return ("scale: full size (the suite's published settings)"
                + (f"; smaller sizes: {others}" if others else ""))
    return f"scale: {scale} (the suite's '{scale}' blocks; leave --scale out for full size)"


@dataclass(frozen=True)
class LaunchPlan:
    """How one node starts training: raw bash words in front of the command, and launch flags inside it.

    The flags go after ``train RECIPE`` (before the overrides), so the script shows them where
    ``distlab train --help`` documents them.
    """

    launcher: str
    flags: tuple[str, ...]
    procs: int
    gpus: int

    def train_argv(self, argv: Sequence[str]) -> list[str]:
        """``train <recipe> <flags> overrides...``."""
        return [*argv[:2], *self.flags, *argv[2:]]

    def describe(self, nodes: int) -> str:
        per_node = f"{self.gpus} GPUs per node, NCCL" if self.gpus else f"{self.procs} CPU processes per node, gloo"
        where = "" if nodes == 1 else f"; srun starts one launcher on each of {nodes} nodes"
        return f"launch: distlab train {' '.join(self.flags)} ({per_node}{where})"


def launch_plan(python: str, nodes: int, gpus_per_node: int, procs_per_node: int | None = None) -> LaunchPlan:
    """GPU nodes launch ``--gpus N`` (one NCCL rank per GPU, or per ``dist.devices_per_rank`` GPUs), CPU nodes
    ``--procs N`` (gloo): never ``--procs`` on a GPU node, which would train on its CPUs.

    Several nodes: ``srun`` starts distlab's own launcher once per node with ``--nodes N`` and a c10d rendezvous
    on the first node; the node rank, address and port are filled in on each node (:data:`NODE_WRAPPER`).
    """
    check_python(python)
    if gpus_per_node > 0 and procs_per_node is not None:
        raise DistlabError(f"--procs {procs_per_node} is for CPU nodes (gloo); a GPU node runs one rank per GPU "
                           f"(dist.devices_per_rank=K for K GPUs a rank): drop --procs or use --gpus-per-node 0")
    if procs_per_node is not None and procs_per_node < 1:
        raise DistlabError(f"procs_per_node={procs_per_node}: need at least one training process per node")
    procs = gpus_per_node if gpus_per_node > 0 else (procs_per_node or 1)
    flags: list[str] = ["--gpus", str(gpus_per_node)] if gpus_per_node > 0 else ["--procs", str(procs)]
    py = shlex.quote(python)
    if nodes == 1:
        return LaunchPlan(f"{py} -m distlab.cli", tuple(flags), procs, max(gpus_per_node, 0))
    flags += ["--nodes", str(nodes), "--rdzv-backend", "c10d"]
    # srun of SLURM 22.05-23.02 does not inherit the job's --cpus-per-task: without it every rank of a node
    # would share one CPU
    cpus = "${SLURM_CPUS_PER_TASK:+--cpus-per-task=$SLURM_CPUS_PER_TASK}"
    launcher = (f'srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 {cpus} --kill-on-bad-exit=1 '
                f"bash -c {shlex.quote(NODE_WRAPPER)} distlab-node {py} -m distlab.cli")
    return LaunchPlan(launcher, tuple(flags), procs, max(gpus_per_node, 0))


# Run by srun on every node, with the training argv as "$@". The launcher is not a rank itself: without
# SLURM_PROCID it does not take srun's one-task-per-node layout for the ranks (distlab.runtime.dist.detect_env) and
# starts its own per-GPU ranks. exec, so srun's signals (the forwarded SIGUSR1) reach it directly.
NODE_WRAPPER = ('unset SLURM_PROCID; exec "$@" --node-rank "$SLURM_NODEID" --master-addr "$MASTER_ADDR" '
                '--master-port "$MASTER_PORT"')

def node_resources(gpus_per_node: int, procs: int, cpus_per_task: int | None, mem: str | None,
                   cpus_per_gpu: int = CPUS_PER_GPU, mem_per_gpu: str = MEM_PER_GPU) -> tuple[int, str]:
    """``--cpus-per-task`` and ``--mem`` of the node's one task: as given, else per GPU (per process on CPU).

    A fixed 8 CPUs / 64G would starve an 8-GPU node (data loading, sandboxes) and over-ask on a 1-GPU one.
    """
    count = gpus_per_node if gpus_per_node > 0 else max(procs, 1)
    each_cpu, each_mem = (cpus_per_gpu, mem_per_gpu) if gpus_per_node > 0 else (CPUS_PER_PROC, MEM_PER_PROC)
    if cpus_per_task is None and each_cpu < 1:
        raise DistlabError(f"--cpus-per-gpu {each_cpu}: need at least 1 CPU per GPU")
    if mem is None and not _MEM_RE.match(str(each_mem)):
        raise DistlabError(f"--mem-per-gpu {each_mem!r} is not a SLURM memory size; write e.g. 32G or 512M")
    return (cpus_per_task if cpus_per_task is not None else each_cpu * count,
            mem if mem is not None else scale_mem(each_mem, count))


def scale_mem(mem: str, times: int) -> str:
    """``32G`` x 8 = ``256G``, in the unit given (none = MB, as SLURM reads it); ``mem`` is already checked."""
    number, unit = (mem[:-1], mem[-1]) if mem[-1].isalpha() else (mem, "")
    return f"{int(number) * times}{unit}"


def check_python(python: str) -> None:
    """An empty ``--python`` would write ``PYTHON=''`` and fail on the node, after the queue wait."""
    if not str(python).strip():
        raise DistlabError("--python is empty; give the interpreter on the cluster nodes, e.g. --python python3 "
                           "or --python /path/to/venv/bin/python (default: python on PATH after --setup)")


def check_setup(setup: Sequence[str]) -> None:
    for line in setup:
        if not line.strip():
            raise DistlabError("--setup is empty; give a bash command run before training, e.g. "
                               "--setup 'source venv/bin/activate' or --setup 'module load cuda'")


def sbatch_header(opts: SbatchOptions) -> list[str]:
    """``#SBATCH`` lines; ``--gres`` only when GPUs are asked for, so CPU-only clusters accept the script."""
    lines = [f"--job-name={opts.job_name}", f"--nodes={opts.nodes}", "--ntasks-per-node=1",
             f"--cpus-per-task={opts.cpus_per_task}", f"--mem={opts.mem}", f"--time={opts.time}",
             f"--array=0-{opts.array_size - 1}"]
    if opts.gpus_per_node > 0:
        lines.append(f"--gres=gpu:{opts.gpus_per_node}")
    if opts.output:
        lines += [f"--output={opts.output}", "--open-mode=append"]  # a requeued run appends to the same log
    if opts.partition:
        lines.append(f"--partition={opts.partition}")
    if opts.account:
        lines.append(f"--account={opts.account}")
    if opts.workdir:
        lines.append(f"--chdir={opts.workdir}")
    lines.append("--requeue" if opts.requeue else "--no-requeue")
    lines.append(f"--signal=B:USR1@{opts.signal_s}")
    out = [f"#SBATCH {line}" for line in lines]
    out += [e if e.startswith("#SBATCH") else f"#SBATCH {e}" for e in opts.extra]
    return out


def render_script(opts: SbatchOptions, commands: Sequence[Sequence[str]], launcher: str = "",
                  setup: str = "", done_files: Sequence[str] | None = None, python: str = "python",
                  env_setup: Sequence[str] = (), about: Sequence[str] = ()) -> str:
    """A complete sbatch script: header, per-array-index command, signal forwarding and requeue.

    ``commands[i]`` is the argv of array task i (quoted here); ``launcher`` is raw bash words put in front
    of it (it may use variables such as ``$MASTER_ADDR``); ``setup`` is raw bash run before launching.
    ``done_files[i]`` is the file whose presence (and, for JSON, a ``status`` other than ``completed`` absent)
    means task i finished: after SIGUSR1 the job is requeued unless it exists, whatever the exit status was.
    ``env_setup`` are the user's bash lines (venv, ``module load``), each run once per start, stopping the job
    when one fails so it never trains in the wrong environment; ``about`` lines are comments under the header.
    """
    if len(commands) != opts.array_size:
        raise DistlabError(f"{len(commands)} commands for an array of {opts.array_size} tasks")
    if done_files is not None and len(done_files) != len(commands):
        raise DistlabError(f"{len(done_files)} done files for {len(commands)} commands")
    cases = []
    for i, cmd in enumerate(commands):
        done = f" DONE={shlex.quote(str(done_files[i]))};" if done_files is not None else ""
        cases.append(f"  {i}) CMD=({' '.join(shlex.quote(a) for a in cmd)});{done} ;;")
    requeue_block = _REQUEUE if opts.requeue else _NO_REQUEUE
    notes = [f"# {line}" for text in about for line in text.splitlines()]
    return "\n".join(["#!/bin/bash", *sbatch_header(opts), *notes, _BODY.format(
        cases="\n".join(cases), launcher=launcher, setup=setup, requeue_exit=REQUEUE_EXIT_CODE,
        env_setup=render_env_setup(env_setup),
        requeue_block=requeue_block, python=shlex.quote(python), signals=TORCHRUN_SIGNALS)])


def render_submit_all(suite_name: str, scripts: Sequence[Path], log_dir: Path) -> str:
    names = " ".join(shlex.quote(p.name) for p in scripts)
    return _SUBMIT.format(suite=suite_name, names=names, log_dir=shlex.quote(str(log_dir)))


def render_env_setup(lines: Sequence[str]) -> str:
    """The ``--setup`` block: nounset off around it (venv and module scripts read unset variables), and a
    failing line ends the job with its text, instead of training with the wrong interpreter."""
    if not lines:
        return ""
    out = ["# environment (--setup)", "set +u"]
    for line in lines:
        msg = shlex.quote(f"[distlab] --setup command failed: {line}; fix it and resubmit")
        out.append(f"{{ {line}\n}} || {{ echo {msg} >&2; exit 1; }}")
    return "\n".join([*out, "set -u"])


def _setup(nodes: int) -> str:
    if nodes == 1:
        return ""
    return _MULTINODE_SETUP


def _check_time(time: str) -> None:
    """SLURM's --time forms (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S), each field in range: sbatch rejects
    99-99:99 at submission, long after the script was written."""
    why = "" if _TIME_RE.match(time) else "not in a SLURM form"
    if not why and time.lower() not in ("infinite", "unlimited"):
        days, _, rest = time.rpartition("-")
        fields = [int(x) for x in rest.split(":")]
        if days:  # D-H[:M[:S]]
            limits = [24, 60, 60][: len(fields)]
        else:  # M | M:S | H:M:S
            limits = {1: [None], 2: [None, 60], 3: [None, 60, 60]}[len(fields)]
        bad = [f for f, lim in zip(fields, limits) if lim is not None and f >= lim]
        if bad:
            why = "a field is out of range (hours < 24 after days, minutes and seconds < 60)"
        elif not days and not any(fields) or days and not int(days) and not any(fields):
            why = "it is zero"
    if why:
        raise DistlabError(f"time={time!r} is not a SLURM time: {why}; write e.g. 12:00:00, 90 (minutes) or "
                           f"2-00:00:00")


def _validate(gpus: int, nodes: int, cpus: int, mem: str, time: str, signal_s: int) -> None:
    if nodes < 1:
        raise DistlabError(f"nodes={nodes}: need at least 1 node")
    if gpus < 0:
        raise DistlabError(f"gpus_per_node={gpus}: use 0 for a CPU cluster or the GPUs each node has")
    if cpus < 1:
        raise DistlabError(f"cpus_per_task={cpus}: need at least 1 CPU")
    if not _MEM_RE.match(str(mem)):
        raise DistlabError(f"mem={mem!r} is not a SLURM memory size; write e.g. 64G, 512M or 16000 (MB)")
    _check_time(str(time))
    if not 0 < signal_s <= 65535:
        raise DistlabError(f"signal_s={signal_s}: give the seconds before the time limit to warn, 1..65535")


_BODY = r"""
# Generated by distlab. SIGUSR1 arrives before the time limit (or via scancel --signal=USR1 --batch):
# it is forwarded to the training processes, which checkpoint and exit {requeue_exit}; the job is then requeued
# and the same command resumes from the run's latest checkpoint.
set -u
REQUEUE_EXIT={requeue_exit}
PYTHON={python}
DONE=""
# torchrun (also inside 'distlab train --procs N') passes on only the signals listed in --signals-to-handle,
# read from PET_SIGNALS_TO_HANDLE (recent torch). With SIGUSR1 listed it forwards it to the workers and then exits
# non-zero itself; without it SIGUSR1 would kill it before any worker checkpointed.
export PET_SIGNALS_TO_HANDLE=${{PET_SIGNALS_TO_HANDLE:-{signals}}}
case "${{SLURM_ARRAY_TASK_ID:-0}}" in
{cases}
  *) echo "[distlab] no command for array task ${{SLURM_ARRAY_TASK_ID}}" >&2; exit 2 ;;
esac
{env_setup}
{setup}
echo "[distlab] $(date '+%F %T') job ${{SLURM_JOB_ID:-?}} task ${{SLURM_ARRAY_TASK_ID:-0}}" \
  "restart ${{SLURM_RESTART_COUNT:-0}} on $(hostname)"

GOT_SIGNAL=0
INTERRUPTED=0
CHILD=""
forward_usr1() {{
  GOT_SIGNAL=1
  INTERRUPTED=1
  echo "[distlab] $(date '+%F %T') SIGUSR1: asking training (pid ${{CHILD}}) to checkpoint and stop" >&2
  [ -n "$CHILD" ] && kill -USR1 "$CHILD" 2>/dev/null
}}
trap forward_usr1 USR1

LAUNCH=({launcher})
"${{LAUNCH[@]}}" "${{CMD[@]}}" &
CHILD=$!
# 'wait' returns early when a trapped signal arrives; keep waiting until the child really exits.
RC=""
while :; do
  INTERRUPTED=0
  wait "$CHILD"; STATUS=$?
  if [ "$STATUS" = 127 ] && [ -n "$RC" ]; then break; fi
  RC=$STATUS
  [ "$INTERRUPTED" = 1 ] || break
done
echo "[distlab] $(date '+%F %T') training exited with status $RC"
# Finished = the done file exists and, if it is a JSON summary, does not say the run stopped early.
finished() {{
  [ -n "$DONE" ] && [ -f "$DONE" ] && "$PYTHON" -c 'import json, sys
try:
    status = json.load(open(sys.argv[1])).get("status", "completed")
except Exception:
    status = "completed"
sys.exit(status != "completed")' "$DONE"
}}
{requeue_block}
"""

_REQUEUE = r"""# Requeue when training says so (exit $REQUEUE_EXIT) or after SIGUSR1 unless the run finished anyway
# (without a done file: unless it exited 0).
if [ "$GOT_SIGNAL" = 1 ]; then
  if [ -n "$DONE" ]; then finished && WANT=0 || WANT=1; else [ "$RC" != 0 ] && WANT=1 || WANT=0; fi
else
  WANT=0
fi
if [ "$RC" = "$REQUEUE_EXIT" ] || [ "$WANT" = 1 ]; then
  echo "[distlab] requeueing job ${SLURM_JOB_ID}; the next start resumes from the latest checkpoint"
  scontrol requeue "${SLURM_JOB_ID}" || exit "$RC"
  exit 0
fi
exit "$RC"
"""

_NO_REQUEUE = r"""if [ "$RC" = "$REQUEUE_EXIT" ]; then
  echo "[distlab] checkpointed; requeue is off, resubmit this script to resume"
fi
exit "$RC"
"""

_MULTINODE_SETUP = r"""MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
MASTER_PORT=${MASTER_PORT:-$((20000 + SLURM_JOB_ID % 20000))}
export MASTER_ADDR MASTER_PORT"""

_SUBMIT = r"""#!/bin/bash
# Submit every experiment of suite '{suite}' (seeds run as job array tasks).
# Run from the project root: jobs start in the directory sbatch is called from, where run dirs are created.
set -euo pipefail
HERE="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
mkdir -p {log_dir}
for script in {names}; do
  jobid=$(sbatch --parsable "$HERE/$script")
  echo "$script -> job $jobid"
done
"""
