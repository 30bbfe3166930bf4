"""The ``suite run`` scheduler: device slots, the plan of ``distlab train`` commands, running them, progress.

It runs ``distlab train`` subprocesses rather than an in-process loop, so every run is exactly the
command printed by ``--dry-run`` (and by ``suite slurm``), a crash in one run cannot take the suite
down, and an interrupted suite resumes by running the same command again: finished runs are skipped
and unfinished ones resume from their last checkpoint. Argument parsing stays in
:mod:`distlab.suite.cli`; this module takes parsed values.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from distlab.errors import DistlabError

if TYPE_CHECKING:
    from distlab.suite.spec import Suite

POLL_S = 0.25
STOP_GRACE_S = 60.0


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


def run_suite(suite: Suite, jobs: Sequence[Job], slots: Sequence[Slot], root: Path, procs: int | None,
              scale: str | None = None) -> Outcome:
    """Record the suite beside its results (for the report), then run every unfinished job."""
    suite_dir = Path(root) / suite.name
    suite_dir.mkdir(parents=True, exist_ok=True)
    planned = [str(Path(j.out_dir).relative_to(suite_dir)) for j in jobs if Path(j.out_dir).is_relative_to(suite_dir)]
    suite.write_snapshot(suite_dir, scale, placement_of(slots), planned)
    return execute(suite.name, jobs, slots, env_for_children(slots, procs), steps_key=steps_key_of(suite.recipe))


def placement_of(slots: Sequence[Slot]) -> dict[str, Any]:
    """Runs at once and, on GPUs, how many of them share each device (the compute each run received)."""
    gpus = [s.cuda_devices for s in slots if s.cuda_devices is not None]
    out: dict[str, Any] = {"runs_at_once": len(slots), "device": "cuda" if gpus else "cpu"}
    if gpus:
        per = Counter(d for g in gpus for d in g.split(","))
        out["runs_per_gpu"] = max(per.values())
        out["gpus"] = len(per)
    return out


def steps_key_of(recipe: str) -> str:
    """The config key holding a run's length for this recipe's progress bars ("steps" if it cannot load)."""
    from distlab.recipe import load_recipe

    try:
        return load_recipe(recipe).steps_key
    except (DistlabError, ImportError):
        return "steps"


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


def plan(suite: Suite, seeds: int | list[int], scale: str | None, root: Path, logs: Path,
         slots: Sequence[Slot], force: bool = False) -> list[Job]:
    """Every experiment x seed as a command; launcher flags come first, the run's overrides after. ``force``
    (``suite run --force``) is passed to each ``train``, whose doctor memory check would otherwise refuse, in its
    log, every run it says cannot fit."""
    flags = [*slots[0].flags, *(["--force"] if force else [])]
    jobs = []
    for spec in suite.runs(seeds, scale=scale, root=root):
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


def execute(suite_name: str, jobs: Sequence[Job], slots: Sequence[Slot], env: dict[str, str],
            steps_key: str = "steps") -> Outcome:
    """Run the jobs, at most one per slot at a time, under one progress view; Ctrl-C checkpoints and stops.

    ``steps_key`` names the config key with a run's length (the recipe's ``steps_key``), for its bar.
    """
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
                    _show_step(run, progress, steps_key)
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


def _show_step(run: Active, progress, steps_key: str = "steps") -> None:
    """The run's last logged step out of its configured length (read from files the trainer writes anyway)."""
    now = time.monotonic()
    if now - run.checked < 2.0:
        return
    run.checked = now
    if run.total is None:
        run.total = _configured_steps(run.job.out_dir / "config.yaml", steps_key)
    step = _last_step(run.job.out_dir / "metrics.jsonl")
    if run.total:
        progress.update(run.task, total=run.total, completed=min(step or 0, run.total))


def _configured_steps(path: Path, key: str = "steps") -> int | None:
    """``key`` (dotted for nested sections) of the run's config.yaml; None while absent or not a positive int."""
    import yaml

    try:
        steps = yaml.safe_load(path.read_text()) or {}
        for part in key.split("."):
            steps = steps.get(part)
    except (OSError, yaml.YAMLError, AttributeError):
        return None
    return steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None


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
