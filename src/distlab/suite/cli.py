"""``distlab suite run|slurm|report``: run every experiment x seed of a suite, on this machine or on SLURM.

``suite run`` is a small scheduler over ``distlab train`` subprocesses rather than an in-process loop, so
every run is exactly the command printed by ``--dry-run`` (and by ``suite slurm``), a crash in one run
cannot take the suite down, and an interrupted suite resumes by running the same command again: finished
runs are skipped and unfinished ones resume from their last checkpoint.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from distlab.errors import DistlabError, near_matches

if TYPE_CHECKING:
    from distlab.suite.spec import Suite

# world-size scaling every suite run asks for unless its YAML says otherwise: the suites' batch and lr are
# tuned for one device, so N devices run a global batch N times larger with lr * sqrt(N)
SCALE_DEFAULTS = {"scale.batch": "linear", "scale.lr": "sqrt"}
RUN_FLAGS = ["--seeds", "--gpus", "--procs", "--parallel", "--smoke", "--dry-run", "--root", "--logs",
             "--no-report", "--create-slurm", "--test"]
SLURM_FLAGS = ["--out", "--gpus-per-node", "--nodes", "--cpus-per-task", "--mem", "--time", "--partition",
               "--account", "--python", "--signal-s"]
POLL_S = 0.25
STOP_GRACE_S = 60.0


# ----------------------------------------------------------------------------------------------- parser

def register(subparsers) -> None:
    """Add ``distlab suite`` with its run / slurm / report subcommands."""
    suite = subparsers.add_parser("suite", help="run experiment suites (experiments x seeds), on SLURM too, "
                                                "and report them with confidence intervals")
    sub = suite.add_subparsers(dest="suite_command", metavar="SUBCOMMAND")
    run = sub.add_parser("run", help="run every experiment x seed here (resumable), then write the report")
    _add_target(run)
    _add_common(run)
    run.add_argument("--gpus", type=int, help="GPUs for the whole suite (-1 = all visible; default: all "
                                             "visible, else CPU)")
    run.add_argument("--procs", type=int, help="CPU processes (gloo) per run instead of GPUs")
    run.add_argument("--parallel", type=int, default=1, help="runs at once; each gets its own GPUs/P slice "
                                                               "(more runs than GPUs: they share the GPUs evenly)")
    run.add_argument("--dry-run", action="store_true", help="print the plan (commands) and start nothing")
    run.add_argument("--logs", default="logs", help="folder for <suite>/<exp>-seed<k>.log (default logs)")
    run.add_argument("--no-report", action="store_true", help="do not build the report at the end")
    run.add_argument("--test", choices=("welch", "paired", "exact"), default="welch",
                     help="significance test of the final report")
    run.add_argument("--create-slurm", action="store_true", help="write SLURM scripts instead of running "
                                                                 "(same as 'distlab suite slurm')")
    _add_slurm_options(run.add_argument_group("with --create-slurm"))
    run.set_defaults(func=cmd_run)
    slurm = sub.add_parser("slurm", help="write one sbatch job array per experiment and submit_all.sh")
    _add_target(slurm)
    _add_common(slurm)
    slurm.add_argument("--procs", type=int, help="training processes per node (default: one per GPU, 1 on CPU)")
    _add_slurm_options(slurm)
    slurm.set_defaults(func=cmd_slurm)
    rep = sub.add_parser("report", help="(re)build the report of a suite's results folder")
    rep.add_argument("target", help="suite name, suite YAML file or results folder")
    rep.add_argument("--root", default="experiment_results", help="results root (default experiment_results)")
    rep.add_argument("--test", choices=("welch", "paired", "exact"), default="welch")
    rep.set_defaults(func=cmd_report)
    suite.set_defaults(func=lambda a: _usage(suite))


def _add_target(p: argparse.ArgumentParser) -> None:
    p.add_argument("suite", help="shipped suite name or path to a suite YAML; trailing key=value words "
                                 "override every run")


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seeds", type=_seeds_arg, default=3, help="seed count K (0..K-1) or a list like 0,3,7")
    p.add_argument("--smoke", action="store_true", help="tiny settings from the suite's smoke blocks (CPU)")
    p.add_argument("--root", default="experiment_results", help="results root (default experiment_results)")


def _add_slurm_options(p) -> None:
    p.add_argument("--out", default="slurm_scripts", help="folder for the scripts (default slurm_scripts)")
    p.add_argument("--gpus-per-node", type=int, default=1, help="GPUs per node; 0 for a CPU cluster")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--cpus-per-task", type=int, default=8)
    p.add_argument("--mem", default="64G")
    p.add_argument("--time", default="24:00:00", help="time limit per job (requeued jobs resume)")
    p.add_argument("--partition")
    p.add_argument("--account")
    p.add_argument("--python", default="python", help="interpreter the jobs run (default: python on PATH)")
    p.add_argument("--signal-s", type=int, default=120, help="seconds before the limit SLURM warns the job")


def _seeds_arg(text: str) -> int | list[int]:
    try:
        return [int(s) for s in text.split(",") if s.strip()] if "," in text else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a count like 3 or a list like 0,3,7") from None


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _extra_overrides(extra: Sequence[str], flags: Sequence[str]) -> dict[str, str]:
    """Words after the suite name: ``key=value`` overrides for every run; anything else is a typo."""
    out: dict[str, str] = {}
    for tok in extra:
        if tok.startswith("-"):
            hint = near_matches(tok.split("=")[0], flags)
            raise DistlabError(f"unknown option {tok}" + (f"; did you mean {', '.join(hint)}?" if hint else ""))
        if "=" not in tok or tok.startswith("="):
            raise DistlabError(f"unexpected argument {tok!r}; overrides look like key=value, e.g. lr=1e-4")
        key, value = tok.split("=", 1)
        out[key] = value
    return out


def _load(target: str, extra: Sequence[str], flags: Sequence[str]) -> Suite:
    from distlab.suite.spec import load_suite

    return load_suite(target).layered(SCALE_DEFAULTS, _extra_overrides(extra, flags))


# ----------------------------------------------------------------------------------------------- slurm

def cmd_slurm(a: argparse.Namespace, extra: list[str]) -> int:
    """Write the suite's sbatch scripts and say how to submit them."""
    from distlab.suite.slurm import write_slurm_scripts

    suite = _load(a.suite, extra, ["--procs", *SLURM_FLAGS, "--seeds", "--smoke", "--root"])
    bundle = write_slurm_scripts(suite, a.out, gpus_per_node=a.gpus_per_node, nodes=a.nodes,
                                 cpus_per_task=a.cpus_per_task, mem=a.mem, time=a.time, seeds=a.seeds,
                                 partition=a.partition, account=a.account, smoke=a.smoke, python=a.python,
                                 signal_s=a.signal_s, procs_per_node=a.procs, results_root=a.root)
    runs = len(suite.runs(a.seeds, smoke=a.smoke, root=a.root))
    print(f"wrote {len(bundle.scripts)} job arrays ({runs} runs) for suite {suite.name} to {Path(a.out)}")
    print(f"submit from the project root (results go to {a.root}/{suite.name}/):")
    print(f"  bash {shlex.quote(_relative(bundle.submit_all))}")
    print(f"then: distlab suite report {suite.name} --root {a.root}")
    return 0


def _relative(path: Path) -> str:
    """Shorter to read and to paste when the path lies under the current directory."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# ----------------------------------------------------------------------------------------------- report

def cmd_report(a: argparse.Namespace) -> int:
    """Rebuild the report and print where it is with a short table."""
    _build_and_print(_suite_dir(a.target, a.root), a.test, sys.stdout)
    return 0


def _suite_dir(target: str, root: str) -> Path:
    """A results folder as given, else ``<root>/<suite name>`` of a suite name or file."""
    if Path(target).is_dir():
        return Path(target)
    from distlab.suite.spec import load_suite

    return Path(root) / load_suite(target).name


def _build_and_print(suite_dir: Path, test: str, out: TextIO) -> Path:
    import json

    from distlab.suite.report import build_report, fmt_ci

    path = build_report(suite_dir, test=test)
    data = json.loads((path.parent / "report.json").read_text())
    base = data.get("baseline")
    print(f"report: {path} (also report.html, report.json)", file=out)
    rows = [["experiment", "seeds", "exact acc (%)", "token acc (%)"]]
    for name, res in data["experiments"].items():
        metrics = res["metrics"]
        rows.append([name + (" *" if name == base else ""), str(len(res["seeds"])),
                     fmt_ci(_finite(metrics.get("exact_accuracy")), scale=100),
                     fmt_ci(_finite(metrics.get("token_accuracy")), scale=100)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)), file=out)
    if base:
        print("  (* baseline; mean ± 95% CI half-width over seeds)", file=out)
    return path


def _finite(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    """report.json writes nan as null; fmt_ci wants floats."""
    if summary is None:
        return None
    return {k: (math.nan if v is None else v) for k, v in summary.items()}


# ----------------------------------------------------------------------------------------------- run

@dataclass(frozen=True)
class Job:
    """One run of the plan: the command, where it writes, where its output goes."""

    label: str
    argv: list[str]
    out_dir: Path
    log: Path


@dataclass
class Active:
    job: Job
    proc: subprocess.Popen
    slot: int
    started: float
    task: Any = None
    log_file: Any = None
    total: int | None = None
    checked: float = 0.0


@dataclass
class Outcome:
    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[tuple[str, int, Path]] = field(default_factory=list)


def cmd_run(a: argparse.Namespace, extra: list[str]) -> int:
    """Run (or print, or write SLURM scripts for) every experiment x seed."""
    if a.create_slurm:
        return cmd_slurm(a, extra)
    suite = _load(a.suite, extra, [*RUN_FLAGS, *SLURM_FLAGS])
    slots = device_slots(a.gpus, a.procs, a.parallel, visible_gpus() if a.procs is None else [])
    jobs = plan(suite, a.seeds, a.smoke, Path(a.root), Path(a.logs), slots)
    if a.dry_run:
        print_plan(suite, jobs, slots, sys.stdout)
        return 0
    suite_dir = Path(a.root) / suite.name
    suite_dir.mkdir(parents=True, exist_ok=True)
    suite.write_snapshot(suite_dir)
    outcome = execute(suite.name, jobs, slots, env_for_children(slots, a.procs))
    print(f"suite {suite.name}: {len(outcome.done)} ran, {len(outcome.skipped)} already finished, "
          f"{len(outcome.failed)} failed")
    for label, rc, log in outcome.failed:
        print(f"  FAILED {label} (exit {rc}); log: {log}")
    if not a.no_report:
        try:
            _build_and_print(suite_dir, a.test, sys.stdout)
        except DistlabError as exc:
            print(f"no report: {exc}")
    return 1 if outcome.failed else 0


@dataclass(frozen=True)
class Slot:
    """Where one concurrent run executes: the launcher flags and, on GPUs, which devices it sees."""

    flags: tuple[str, ...]
    cuda_devices: str | None = None

    def describe(self) -> str:
        return f"GPUs {self.cuda_devices}" if self.cuda_devices is not None else "CPU"


def visible_gpus() -> list[str]:
    """Device ids this process may hand out, honouring an existing CUDA_VISIBLE_DEVICES."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        import torch

        count = torch.cuda.device_count()
    except ImportError:
        count = 0
    if env is not None and env.strip():
        return [d.strip() for d in env.split(",") if d.strip()][:count]
    return [str(i) for i in range(count)]


def device_slots(gpus: int | None, procs: int | None, parallel: int, visible: Sequence[str]) -> list[Slot]:
    """P disjoint device sets: GPUs split evenly among the concurrent runs, or CPU processes per run."""
    if parallel < 1:
        raise DistlabError(f"--parallel {parallel}: run at least 1 at a time")
    if gpus is not None and procs is not None:
        raise DistlabError("use either --gpus (CUDA) or --procs (CPU processes per run), not both")
    if procs is not None:
        if procs < 1:
            raise DistlabError(f"--procs {procs} must be 1 or more")
        return [Slot(("--procs", str(procs))) for _ in range(parallel)]
    if gpus is None:
        if not visible:
            return [Slot(()) for _ in range(parallel)]  # CPU, one process per run
        gpus = -1
    total = len(visible) if gpus == -1 else gpus
    if total < 1 or total > len(visible):
        raise DistlabError(f"--gpus {gpus}: {len(visible)} CUDA GPUs are visible; pick 1..{len(visible)} "
                           f"(-1 = all) or use --procs N to run on CPU")
    if parallel > total and parallel % total == 0:
        # more runs than GPUs: small runs share a GPU (each GPU hosts parallel / total of them), which keeps
        # a big GPU busy when one small model alone leaves it mostly idle
        return [Slot(("--gpus", "1"), visible[i % total]) for i in range(parallel)]
    if total % parallel:
        raise DistlabError(f"--gpus {total} cannot be split evenly into --parallel {parallel} runs; pick a "
                           f"divisor or a multiple of {total}")
    per = total // parallel
    return [Slot(("--gpus", str(per)), ",".join(visible[i * per:(i + 1) * per])) for i in range(parallel)]


def plan(suite: Suite, seeds: int | list[int], smoke: bool, root: Path, logs: Path, slots: Sequence[Slot]) -> list[Job]:
    """Every experiment x seed as a command; launcher flags come first, the run's overrides after."""
    flags = list(slots[0].flags)
    jobs = []
    for spec in suite.runs(seeds, smoke=smoke, root=root):
        argv = [sys.executable, "-m", "distlab.cli", "train", suite.recipe, *flags, *spec.overrides]
        label = f"{spec.experiment}-seed{spec.seed}"
        jobs.append(Job(label, argv, spec.out_dir, logs / suite.name / f"{label}.log"))
    return jobs


def print_plan(suite: Suite, jobs: Sequence[Job], slots: Sequence[Slot], out: TextIO) -> None:
    from distlab.suite.runs import is_finished

    todo = [j for j in jobs if not is_finished(j.out_dir)]
    where = ", ".join(s.describe() for s in slots)
    print(f"suite {suite.name}: {len(suite.experiments)} experiments, {len(jobs)} runs "
          f"({len(jobs) - len(todo)} already finished), {len(slots)} at a time on {where}", file=out)
    for job in jobs:
        state = "skip (finished)" if job not in todo else f"log {job.log}"
        print(f"# {job.label} -> {job.out_dir} [{state}]", file=out)
        print(shlex.join(job.argv), file=out)


def env_for_children(slots: Sequence[Slot], procs: int | None) -> dict[str, str]:
    """Environment shared by all runs: unbuffered logs, SIGUSR1 forwarding, a fair share of CPU threads."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("PET_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1")
    if slots[0].cuda_devices is None:
        share = (os.cpu_count() or 1) // (len(slots) * (procs or 1))
        env.setdefault("OMP_NUM_THREADS", str(max(1, share)))
    return env


def execute(suite_name: str, jobs: Sequence[Job], slots: Sequence[Slot], env: dict[str, str]) -> Outcome:
    """Run the jobs, at most one per slot at a time, under one progress view; Ctrl-C checkpoints and stops."""
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    from distlab.suite.runs import is_finished

    outcome = Outcome(skipped=[j.label for j in jobs if is_finished(j.out_dir)])
    pending = [j for j in jobs if not is_finished(j.out_dir)]
    console = Console(stderr=True)
    # a speed window longer than any run, so the ETA is the suite's average pace, not "unknown"
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console,
                        speed_estimate_period=7 * 24 * 3600.0)
    total = progress.add_task(f"suite {suite_name}", total=len(jobs), completed=len(outcome.skipped))
    if outcome.skipped:
        progress.console.print(f"{len(outcome.skipped)} of {len(jobs)} runs already finished; skipping them")
    active: list[Active] = []
    free = list(range(len(slots)))
    try:
        with progress:
            while pending or active:
                while pending and free:
                    slot = free.pop(0)
                    active.append(_start(pending.pop(0), slot, slots[slot], env, progress))
                time.sleep(POLL_S)
                for run in active:
                    _show_step(run, progress)
                for run in [r for r in active if r.proc.poll() is not None]:
                    active.remove(run)
                    free.append(run.slot)
                    _finish(run, progress, total, outcome)
    except KeyboardInterrupt:
        _stop_all(active, console)
        raise
    return outcome


def _start(job: Job, slot_id: int, slot: Slot, env: dict[str, str], progress) -> Active:
    job.log.parent.mkdir(parents=True, exist_ok=True)
    log = open(job.log, "a")
    log.write(f"\n===== {time.strftime('%F %T')} {slot.describe()}\n{shlex.join(job.argv)}\n")
    log.flush()
    child_env = dict(env)
    if slot.cuda_devices is not None:
        child_env["CUDA_VISIBLE_DEVICES"] = slot.cuda_devices
    # own session: Ctrl-C reaches only this scheduler, which then asks each run to checkpoint (SIGUSR1)
    proc = subprocess.Popen(job.argv, stdout=log, stderr=subprocess.STDOUT, env=child_env,
                            start_new_session=True)
    task = progress.add_task(f"  {job.label} [{slot.describe()}]", total=None)
    return Active(job, proc, slot_id, time.monotonic(), task, log)


def _show_step(run: Active, progress) -> None:
    """The run's last logged step out of its ``steps`` (read from files the trainer writes anyway)."""
    now = time.monotonic()
    if now - run.checked < 2.0:
        return
    run.checked = now
    if run.total is None:
        run.total = _configured_steps(run.job.out_dir / "config.yaml")
    step = _last_step(run.job.out_dir / "metrics.jsonl")
    if run.total:
        progress.update(run.task, total=run.total, completed=min(step or 0, run.total))


def _configured_steps(path: Path) -> int | None:
    import yaml

    try:
        steps = (yaml.safe_load(path.read_text()) or {}).get("steps")
    except (OSError, yaml.YAMLError, AttributeError):
        return None
    return steps if isinstance(steps, int) and steps > 0 else None


def _last_step(path: Path) -> int | None:
    """Step of the last complete line of metrics.jsonl, reading only the file's tail."""
    import json

    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return None


def _finish(run: Active, progress, total_task, outcome: Outcome) -> None:
    from distlab.suite.runs import is_finished

    run.log_file.close()
    progress.remove_task(run.task)
    progress.advance(total_task)
    took = time.monotonic() - run.started
    rc = run.proc.returncode
    if rc == 0 and is_finished(run.job.out_dir):
        outcome.done.append(run.job.label)
        progress.console.print(f"done {run.job.label} in {took:.0f}s")
        return
    outcome.failed.append((run.job.label, rc, run.job.log))
    tail = run.job.log.read_text(errors="replace").strip().splitlines()[-5:]
    why = f"exit {rc}" if rc else "exited 0 without a completed summary.json"
    progress.console.print(f"[red]FAILED[/red] {run.job.label} ({why}) after {took:.0f}s; log {run.job.log}",
                           highlight=False)
    for line in tail:
        progress.console.print(f"    {line}", markup=False, highlight=False)


def _stop_all(active: Sequence[Active], console) -> None:
    """Ask every run to checkpoint and stop (SIGUSR1), so rerunning the suite resumes them; kill stragglers."""
    for run in active:
        console.print(f"stopping {run.job.label}: checkpointing (rerun the suite to resume)")
        try:
            run.proc.send_signal(signal.SIGUSR1)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_GRACE_S
    for run in active:
        try:
            run.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            run.proc.kill()
            run.proc.wait()
        run.log_file.close()
