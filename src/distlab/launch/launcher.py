"""``distlab train``: validate in this process, then start the ranks with ``torch.distributed.run``.

Validation happens before any worker exists, so a typo costs a second, not a cluster allocation.
If this process is already one rank of a job (torchrun, srun, accelerate launch) it simply becomes
the worker.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distlab.config import finalize_config, resolve_config, resolve_with_smoke, to_yaml
from distlab.errors import DistlabError
from distlab.recipe import load_recipe
from distlab.runtime.dist import detect_env, port_is_free
from distlab.training.wrap import check_gpus_available


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
    force: bool = False  # start a run the doctor's memory estimate says cannot fit here


def check_options(opts: LaunchOptions) -> None:
    """Launch flags are checked like config values: before anything starts, one line each."""
    if opts.nodes < 1:
        raise DistlabError(f"--nodes {opts.nodes} must be 1 or more")
    if not 0 <= opts.node_rank < opts.nodes:
        raise DistlabError(f"--node-rank {opts.node_rank} must be in 0..{opts.nodes - 1} for --nodes {opts.nodes}")
    if opts.master_port is not None and not 1 <= opts.master_port <= 65535:
        raise DistlabError(f"--master-port {opts.master_port} is not a TCP port; use 1024..65535, e.g. 29500")
    if opts.max_restarts < 0:
        raise DistlabError(f"--max-restarts {opts.max_restarts} must be 0 or more")
    if opts.gpus is not None and opts.gpus < -1:
        raise DistlabError(f"--gpus {opts.gpus} must be -1 (all visible), 0 (CPU) or a count")


def check_run_dir(run_dir: str, name: str) -> None:
    """Fail in preflight, not in a rank, when the run directory cannot be created or written.

    Nothing is created here: the nearest existing ancestor is probed with an anonymous temporary
    file, which a read-only mount refuses even for root.
    """
    import tempfile

    base = Path(run_dir)
    target = base / name
    for path in (base, target):
        if path.exists() and not path.is_dir():
            raise DistlabError(f"run.dir {path} is a file, not a directory; set run.dir to a directory path")
    probe = target if target.exists() else base
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise DistlabError(f"run.dir {run_dir} lies under the file {probe}; set run.dir to a directory path")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        raise DistlabError(f"run.dir {run_dir} is not writable ({exc.strerror} at {probe}); set run.dir to a "
                           f"writable directory") from None


def world_plan(opts: LaunchOptions) -> tuple[int, list[str]]:
    """Processes per node and the overrides that pin the device type for that choice."""
    check_options(opts)
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
    return args + ["--module", "distlab.launch.worker", *worker_args]


def preflight(recipe_name: str, presets: list[str], overrides: list[str], world_size: int,
              procs_per_node: int | None = None, show_only: bool = False, any_machine: bool = False):
    """Everything that can be checked before starting processes: schema, types, placement, data, divisibility.

    ``show_only`` (``--show-config``) stops after the config itself, so a config can be inspected
    before its dataset exists. ``any_machine`` (``doctor --recipe``, which plans runs for other machines too)
    does not hold the GPUs a placement names against the ones this machine has.
    """
    recipe = load_recipe(recipe_name)
    cfg = resolve_config(recipe, presets, overrides)
    cfg, _ = finalize_config(recipe, cfg, world_size)
    if not show_only:
        check_before_start(recipe, cfg, world_size, procs_per_node or world_size, any_machine)
    return recipe, cfg


def check_before_start(recipe: Any, cfg: Any, world_size: int, procs_per_node: int, any_machine: bool = False
                       ) -> None:
    """The checks of a resolved and finalized config that need this machine or the recipe: the run directory, the
    placement against the GPUs here, the device, the recipe's own ``validate``."""
    from distlab.training.placement import check_config

    check_run_dir(cfg.run.dir, cfg.run.name)
    gpus = None if any_machine else _visible_gpus()
    check_config(cfg, procs_per_node, gpus)
    if gpus is not None:
        check_device(cfg.dist.device, gpus)
    if recipe.validate is not None:
        recipe.validate(cfg, world_size)


def check_device(device: str, visible_gpus: int) -> None:
    """``dist.device=cuda`` on a machine without a visible GPU, refused here: each rank refuses it too, but only
    once it runs, after the run directory exists."""
    if device == "cuda" and visible_gpus == 0:
        raise DistlabError("dist.device=cuda but no CUDA device is visible on this machine; use dist.device=cpu (or "
                           "auto), or check CUDA_VISIBLE_DEVICES and the driver (distlab doctor shows what it sees)")


def _visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def ranks_per_node(nproc: int, opts: LaunchOptions, devices_per_rank: int) -> int:
    """With ``--gpus N`` and ``dist.devices_per_rank=K`` a node runs N/K ranks of K GPUs each."""
    if opts.gpus is None or opts.gpus == 0:
        return nproc
    k = devices_per_rank
    if k < 1 or nproc % k:
        raise DistlabError(f"--gpus {nproc} is not a multiple of dist.devices_per_rank={k}; use --gpus "
                           f"{max(k, nproc - nproc % k) if k >= 1 else 1}")
    return nproc // k


# (recipe, cfg, presets, overrides, processes on this node, options, evaluating): raises to refuse the run
MemoryCheck = Callable[[Any, Any, list, list, int, LaunchOptions, bool], None]


def rerun_command(argv: list[str]) -> str:
    """The command that reruns (resumes) this run, as the manifest and the closing line print it. A ``PYTHONPATH``
    the launch had goes in front: a user's reward module (``reward_funcs=[my_pkg.rewards:score]``) is found through
    it, and a resume without it would stop at the import."""
    command = shlex.join(["distlab", *argv])
    path = os.environ.get("PYTHONPATH", "")
    return f"PYTHONPATH={shlex.quote(path)} {command}" if path else command


def train(recipe_name: str, presets: list[str], overrides: list[str], opts: LaunchOptions,
          eval_checkpoint: Path | None = None, eval_output: Path | None = None,
          memory_check: MemoryCheck | None = None, cmdline: str | None = None,
          resolved: tuple[Any, str | None] | None = None) -> int:
    """Start the ranks of a training run (or, with ``eval_checkpoint``, of an evaluation). ``memory_check`` runs
    after every other check and before the run directory exists: the ``distlab`` command passes the doctor's (the
    core never imports the doctor). ``cmdline``: what reruns this run, for the manifest and the closing line's
    ``resume:`` (default: this process's command line; ``distlab.train`` passes its own). ``resolved``: the
    ``resolve_with_smoke`` result of these presets and overrides (with :func:`world_plan`'s pinned ones first), from
    a caller that needed the config already (``distlab.train`` names the run from it), so it is not resolved twice."""
    from distlab.launch import worker
    if detect_env().launcher != "single":  # already a rank of somebody else's launcher
        return worker.main(worker.worker_argv(recipe_name, presets, overrides, eval_checkpoint,
                                                      eval_output))
    nproc, pinned = world_plan(opts)
    overrides = [*pinned, *overrides]
    recipe = load_recipe(recipe_name)
    if eval_checkpoint is not None:  # settings of the training job's shape that an evaluation does not use
        overrides = [*recipe.eval_overrides, *overrides]
    # the one resolution (or the caller's): the ranks take it (handoff)
    cfg, smoke = resolved if resolved is not None else resolve_with_smoke(recipe, presets, overrides)
    nproc = ranks_per_node(nproc, opts, cfg.dist.devices_per_rank)
    cfg, scaling = finalize_config(recipe, cfg, nproc * opts.nodes)
    check_before_start(recipe, cfg, nproc * opts.nodes, nproc)
    if memory_check is not None:
        memory_check(recipe, cfg, presets, overrides, nproc, opts, eval_checkpoint is not None)
    # the run name is fixed here so that every restart (and every node) lands in the same directory
    overrides = [*overrides, f"run.name={cfg.run.name}"]
    os.environ["DISTLAB_CMDLINE"] = cmdline or rerun_command(sys.argv[1:])
    single = nproc * opts.nodes == 1 and opts.max_restarts == 0
    if not single and opts.master_port and opts.nodes == 1 and not port_is_free(opts.master_port):
        raise DistlabError(f"MASTER_PORT {opts.master_port} is busy; pick another --master-port")
    import shutil

    from distlab.launch.handoff import ResolvedRun, write_handoff
    from distlab.run.rundir import RunLock

    run_dir = Path(cfg.run.dir) / cfg.run.name
    # one lock per run, taken by the first node's launcher: on a shared file system the other nodes' launchers
    # would find it taken by their own job and refuse to start
    lock = _acquire(RunLock(run_dir)) if eval_checkpoint is None and opts.node_rank == 0 else None
    # the launcher's own folder: the config its ranks run (resolved above, not again by them) and their exit lines
    folder = _exits_dir()
    try:
        handoff = (write_handoff(folder / "resolved.json", ResolvedRun(to_yaml(cfg), scaling, smoke))
                   if folder is not None else None)
        worker_args = worker.worker_argv(recipe_name, presets, overrides, eval_checkpoint, eval_output, handoff)
        if single:
            return worker.main(worker_args)
        return _torchrun(nproc, opts, worker_args, run_dir, cfg.dist.timeout_s, folder)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        if lock is not None:
            lock.release()


def _acquire(lock):
    """Take the run lock; a disk that is full before the run even starts is one line naming the path."""
    import errno

    try:
        return lock.acquire()
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DistlabError(f"no space left on device writing {lock.path}; free space or point run.dir at a "
                               f"larger disk, then rerun the same command") from None
        if exc.filename is None:
            exc.filename = str(lock.path)
        raise


def _child_pids() -> list[int]:
    """Pids of this process's direct children (the ranks torchrun started), from ``/proc``."""
    me, out = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == me:
            out.append(int(entry))
    return out


def _proc_state(pid: int) -> str | None:
    """The one-letter state of ``pid`` from ``/proc`` (R, S, D, T stopped, t traced, Z zombie), or None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _proc_rank(pid: int) -> int | None:
    """The global rank (``RANK``) a child process was started with, or None (not a rank, or not exec'd yet)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"RANK="):
            try:
                return int(item[5:])
            except ValueError:
                return None
    return None


WATCH_GRACE_S = 10.0  # how long past its deadline a stopped or a finished-but-alive rank may linger


class _Watch:
    """The launcher's eye on its ranks, beside torchrun's agent.

    torchrun notices a rank that *exits*. It cannot tell a stopped rank (SIGSTOP, Ctrl-Z of one process:
    state T) from a busy one, and it waits forever on a rank that wrote its error but then cannot exit.
    Every half second this thread reads ``/proc`` for each rank torchrun started (:meth:`add`) and

    * kills a rank that has been stopped for longer than ``dist.timeout_s`` plus a grace while others run
      (they have given up on it by then) and remembers it, so the failure names it as stopped; every rank
      stopped together (a suspended job) is a pause and left alone;
    * kills a rank still alive a grace after it reported its failure (a rank hung in teardown).

    ``closing`` (called by torchrun's shutdown for every rank still running) records which ranks
    were ended *because* the job had already failed, and which of those were stopped: the ranks that
    died as a consequence are never the ones blamed.
    """

    def __init__(self, timeout_s: float, exits_dir: Path | None, grace_s: float = WATCH_GRACE_S,
                 every_s: float = 0.5, sees_all: bool = True) -> None:
        import threading

        self.timeout_s, self.exits_dir, self.grace_s, self.every_s = timeout_s, exits_dir, grace_s, every_s
        self.sees_all = sees_all  # False on one node of several: ranks elsewhere may be running
        self.stopped: set[int] = set()  # ranks found stopped (state T)
        self.ended: set[int] = set()  # ranks still running when the job was torn down
        self.hung: set[int] = set()  # ranks killed for lingering after their exit line
        self._stopped_since: dict[int, float] = {}  # pid -> when first seen stopped
        self._reported_at: dict[int, float] = {}  # pid -> when its exit file was first seen
        self._ranks: dict[int, int] = {}  # pid -> rank
        self._killed: set[int] = set()  # pids this watch has killed
        self._last_check: float | None = None
        self._pids: set[int] = set()  # the ranks' pids, as torchrun starts them
        self._lock = threading.Lock()
        self._quit = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="distlab-rank-watch", daemon=True)

    def start(self) -> _Watch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._quit.set()
        self._thread.join(timeout=5)

    def add(self, pid: int, rank: int | None = None) -> None:
        """Watch ``pid``, a rank torchrun has just started (its ``RANK``, if known, else read from ``/proc``)."""
        with self._lock:
            self._pids.add(pid)
            if rank is not None:
                self._ranks[pid] = rank

    def rank(self, pid: int) -> int | None:
        if pid not in self._ranks:
            r = _proc_rank(pid)
            if r is None:
                return None
            self._ranks[pid] = r
        return self._ranks[pid]

    def _loop(self) -> None:
        import time

        while not self._quit.wait(self.every_s):
            try:
                self.check(time.monotonic())
            except Exception:  # a /proc race must never kill the watch (nor the launcher)
                pass

    def check(self, now: float) -> None:
        """One look at every rank (``now``: ``time.monotonic()``); kills what has outstayed its deadline."""
        with self._lock:
            if self._last_check is not None and now - self._last_check > max(5.0, 10 * self.every_s):
                # the launcher itself was stopped or starved (a whole-job suspend): nobody waited on anybody
                self._stopped_since.clear()
                self._reported_at.clear()
            self._last_check = now
            seen = {}
            for pid in list(self._pids):
                rank, state = self.rank(pid), _proc_state(pid)
                if state in (None, "X"):
                    self._pids.discard(pid)  # gone (and reaped)
                elif rank is not None and state != "Z" and pid not in self._killed:
                    seen[pid] = (rank, state)
            running = not self.sees_all or any(state != "T" for _, state in seen.values())
            for pid, (rank, state) in seen.items():
                if state != "T" or not running:  # every rank stopped at once is a pause, not a fault
                    self._stopped_since.pop(pid, None)
                else:
                    since = self._stopped_since.setdefault(pid, now)
                    if now - since > self.timeout_s + self.grace_s:
                        self.stopped.add(rank)
                        print(f"distlab: rank {rank} (pid {pid}) has been stopped (SIGSTOP) for {now - since:.0f} s, "
                              f"longer than dist.timeout_s={self.timeout_s:g}; ending the job", file=sys.stderr)
                        self._killed.add(pid)
                        _kill_group(pid)
                        continue
                if self.exits_dir is not None and (self.exits_dir / f"rank{rank}-pid{pid}").exists():
                    at = self._reported_at.setdefault(pid, now)
                    if now - at > self.grace_s:
                        self.hung.add(rank)
                        print(f"distlab: rank {rank} (pid {pid}) reported its failure {now - at:.0f} s ago but did "
                              f"not exit; ending it", file=sys.stderr)
                        self._killed.add(pid)
                        _kill_group(pid)

    def closing(self, pid: int) -> None:
        """torchrun is about to end ``pid`` because the job is over (a failure elsewhere, or a signal)."""
        rank = self.rank(pid)
        if rank is None:
            return
        with self._lock:
            if _proc_state(pid) == "T":
                self.stopped.add(rank)
            self.ended.add(rank)


def _kill_group(pid: int) -> None:
    """SIGKILL a rank and whatever it started (each rank leads its own process group under torchrun)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        _kill(pid, signal.SIGKILL)


class _Forwarder:
    """The launcher's SIGTERM/SIGINT/SIGUSR1 handler: ask every rank to checkpoint and stop.

    The ranks get SIGUSR1 (their "stop at the next step boundary" signal) and the launcher keeps
    supervising them until they exit. A second SIGINT/SIGTERM means "now": the ranks get SIGTERM
    (which, after the first, makes them leave at once) and torchrun's own shutdown takes over.
    Once torchrun has returned (``done``) a second signal is only remembered: the launcher is
    already on its way out and must not be interrupted while it explains what happened.
    """

    def __init__(self) -> None:
        self.first: int | None = None
        self.hard: int | None = None  # the second SIGINT/SIGTERM, if any
        self.done = False

    def __call__(self, signum: int, frame) -> None:  # noqa: ARG002
        from torch.distributed.elastic.multiprocessing.api import SignalException

        if self.first is not None and signum != signal.SIGUSR1:
            if self.hard is None:
                self.hard = signum
            if self.done:
                return
            for pid in _child_pids():
                _kill(pid, signal.SIGTERM)
            raise SignalException(f"second {signal.Signals(signum).name}", sigval=signal.Signals(signum))
        if self.done:  # the ranks are gone already: nothing to forward
            return
        if self.first is None:
            self.first = signum
            print(f"distlab: received {signal.Signals(signum).name}; asking the ranks to checkpoint and stop "
                  f"(send it again to stop at once)", file=sys.stderr)
        for pid in _child_pids():
            _kill(pid, signal.SIGUSR1)


def _stopped_at_once(signum: int, second: bool = True) -> int:
    """The launcher's last line and exit status (128+N) after a second SIGINT/SIGTERM (or torchrun's SIGHUP,
    SIGQUIT) ended the ranks."""
    name = signal.Signals(signum).name
    print(f"distlab: stopped at once by {'a second ' if second else ''}{name}: no checkpoint was taken for the "
          f"current step; rerun the same command to resume from the last one", file=sys.stderr)
    return 128 + signum


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _torchrun(nproc: int, opts: LaunchOptions, worker_args: list[str], run_dir: Path, timeout_s: float,
              exits_dir: Path | None) -> int:
    """Run the ranks under torchrun's agent, with signals forwarded and failures explained; each failing rank also
    leaves its exit line in ``exits_dir`` (:func:`_exits_dir`), off the run's disk, so a full run disk still gets
    explained."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser
    from torch.distributed.run import run as torchrun

    from distlab.launch.worker import EXIT_DIR_ENV, LAUNCHER_PID_ENV

    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())
    if exits_dir is not None:
        os.environ[EXIT_DIR_ENV] = str(exits_dir)
    logs_at = _log_sizes(run_dir)  # rank logs are appended to across resumes: only what this job writes counts
    watch = _Watch(timeout_s, exits_dir, sees_all=opts.nodes == 1).start()
    # torchrun would turn SIGTERM/SIGINT into an exception that kills the ranks without a checkpoint;
    # leave it only the signals that should end the job at once, and handle the stop signals here
    forward = _Forwarder()
    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler as sh

    original_close, original_popen = sh.SubprocessHandler.close, sh.SubprocessHandler._popen

    def popen_watched(self, args, env):
        proc = original_popen(self, args, env)
        rank = env.get("RANK")
        watch.add(proc.pid, int(rank) if rank and rank.isdigit() else None)
        return proc

    def close_now(self, death_sig=None) -> None:  # noqa: ARG001
        """torchrun ends surviving ranks with SIGTERM and waits 30 s; our ranks treat SIGTERM as "checkpoint
        at the next step", and a SIGSTOPped rank cannot act on it at all, so after a failure end them now."""
        watch.closing(self.proc.pid)
        original_close(self, signal.SIGKILL)

    sh.SubprocessHandler.close, sh.SubprocessHandler._popen = close_now, popen_watched
    argv = torchrun_args(nproc, opts, worker_args)
    argv.insert(0, "--signals-to-handle=SIGHUP,SIGQUIT")
    args = get_args_parser().parse_args(argv)
    try:
        try:
            torchrun(args)
        finally:
            forward.done = True
            watch.stop()
    except ChildFailedError as exc:
        if forward.hard is not None:
            return _stopped_at_once(forward.hard)
        stopped = _preempted(run_dir, forward.first)
        if stopped:
            return stopped
        raise DistlabError(explain_failure({r: f.exitcode for r, f in exc.failures.items()}, run_dir, timeout_s,
                                           watch=watch, exits_dir=exits_dir, logs_at=logs_at)) from None
    except SignalException as exc:
        return _stopped_at_once(forward.hard or exc.sigval, second=forward.hard is not None)
    finally:
        for sig, handler in previous.items():
            # after a stop signal the launcher is on its way out: a late second one must not kill it before it
            # exits 128+N (Python restores SIG_DFL for its own handlers while it shuts down; SIG_IGN it keeps)
            stopping = forward.first in (signal.SIGINT, signal.SIGTERM) and sig in (signal.SIGINT, signal.SIGTERM)
            signal.signal(sig, signal.SIG_IGN if stopping else handler)
        os.environ.pop(LAUNCHER_PID_ENV, None)
        os.environ.pop(EXIT_DIR_ENV, None)
        sh.SubprocessHandler.close, sh.SubprocessHandler._popen = original_close, original_popen
    return _preempted(run_dir, forward.first) or (_stopped_at_once(forward.hard) if forward.hard else 0)


def _exits_dir(tmp: str | None = None) -> Path | None:
    """A fresh temporary folder for the launcher's hand-off and its ranks' exit lines (None if there is no writable
    temp dir).

    Its name carries this launcher's pid; folders left by launchers that were SIGKILLed (so never
    cleaned up) are removed here, by the next launcher of the same user.
    """
    import shutil
    import tempfile

    base = Path(tmp or tempfile.gettempdir())
    for old in base.glob("distlab-exits-*-*"):
        try:
            pid = int(old.name.split("-")[2])
            if old.stat().st_uid == os.getuid() and not Path(f"/proc/{pid}").exists():
                shutil.rmtree(old, ignore_errors=True)
        except (ValueError, IndexError, OSError):
            continue
    try:
        return Path(tempfile.mkdtemp(prefix=f"distlab-exits-{os.getpid()}-", dir=base))
    except OSError:
        return None


def _log_sizes(run_dir: Path) -> dict[str, int]:
    sizes = {}
    for log in run_dir.glob("rank*.log"):
        try:
            sizes[log.name] = log.stat().st_size
        except OSError:
            pass
    return sizes


def _preempted(run_dir: Path, signum: int | None) -> int:
    """128+N if the run stopped early because of signal N (to the launcher or to the ranks), else 0."""
    import json

    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    name = summary.get("stopped_by")
    if summary.get("status") != "preempted" or (name is None and signum is None):
        return 0
    if signum is not None and name != signal.Signals(signum).name:  # the ranks saw the forwarded SIGUSR1
        from distlab.atomic import atomic_write_json

        atomic_write_json(run_dir / "summary.json", dict(summary, stopped_by=signal.Signals(signum).name))
    signum = signum or int(getattr(signal, name, signal.SIGTERM))
    saved = (f"checkpoint saved in {run_dir}/checkpoints; rerun the same command to resume" if summary.get("step")
             else "nothing trained yet, so nothing saved; rerun the same command to start again")
    print(f"distlab: run preempted by {signal.Signals(signum).name} at step {summary.get('step')}; {saved}",
          file=sys.stderr)
    return 128 + signum


def _rank_exit(log: Path, start: int = 0) -> tuple[str, str] | None:
    """``(kind, text)`` from the last ``exit:`` line a rank wrote (from byte ``start`` on) before it ended, or None."""
    try:
        with open(log, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    found = None
    for line in text.splitlines():
        m = re.search(r"exit: (\w+): (.*)$", line)
        if m:
            found = (m.group(1), m.group(2))
    return found


def _exit_file(exits_dir: Path | None, rank: int) -> tuple[str, str] | None:
    """``(kind, text)`` a rank left in the launcher's exit folder (the newest, if it was restarted), or None."""
    if exits_dir is None:
        return None
    found = sorted(exits_dir.glob(f"rank{rank}-pid*"), key=lambda p: p.stat().st_mtime)
    if not found:
        return None
    kind, _, text = found[-1].read_text(errors="replace").strip().partition(": ")
    return kind, text


def _tail(log: Path, n: int = 6, start: int = 0) -> str:
    try:
        with open(log, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
    except OSError:
        text = ""
    lines = [ln for ln in text.splitlines() if ln.strip()][-n:]
    return "\n".join(f"  | {ln[:300]}" for ln in lines)


def explain_failure(exitcodes: dict[int, int], run_dir: Path, timeout_s: float, watch: _Watch | None = None,
                    exits_dir: Path | None = None, logs_at: dict[str, int] | None = None) -> str:
    """Name the rank that caused a failed job, not merely the first rank torchrun saw exit.

    A rank that crashed writes ``exit: crash`` or ``exit: error``; a rank that only lost its peers
    writes ``exit: peer``; a rank that hung, was stopped or was killed writes nothing. The launcher's
    :class:`_Watch` adds what only it saw: which ranks were stopped (state T), and which were still
    running when the job was torn down (they died *of* the failure, so they are never blamed). So:
    blame a stopped rank; else one that crashed; else one that died of something from outside (a
    signal distlab did not send); else one that never answered while others waited; quote its log.
    """
    logs_at = logs_at or {}
    logs = sorted(run_dir.glob("rank*.log"), key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))
    ranks = sorted({int(re.sub(r"\D", "", p.stem)) for p in logs} | set(exitcodes))
    exits = {r: _exit_file(exits_dir, r) or _rank_exit(run_dir / f"rank{r}.log", logs_at.get(f"rank{r}.log", 0))
             for r in ranks}
    stopped = sorted(watch.stopped) if watch else []
    ended = (watch.ended - watch.stopped) if watch else set()  # killed by the launcher once the job had failed
    crashed = [r for r in ranks if exits[r] and exits[r][0] in ("crash", "error", "interrupted")]
    waiting = [r for r in ranks if exits[r] and exits[r][0] == "peer"]
    silent = [r for r in ranks if exits[r] is None and r not in stopped]
    outside = [r for r in silent if r not in ended and exitcodes.get(r) is not None]  # ended on their own
    hung = [r for r in silent if r in ended]
    waited = f"rank(s) {', '.join(map(str, waiting))} waited {timeout_s:.0f} s (dist.timeout_s) for it" \
        if waiting else f"its peers could wait no longer than dist.timeout_s={timeout_s:g}"

    def code(r: int) -> str:
        c = exitcodes.get(r)
        if c is None or r in ended:  # the launcher's own SIGKILL says nothing about the rank
            return ""
        return f" (killed by {signal.Signals(-c).name})" if c < 0 else f" (exit code {c})"

    if stopped:
        r = stopped[0]
        head = (f"rank {r} did not arrive: it was stopped (process state T: SIGSTOP, or Ctrl-Z or a debugger on that "
                f"process) and {waited}")
    elif crashed:
        r = crashed[0]
        head = f"rank {r} failed{code(r)}: {exits[r][1]}"
    elif outside:
        r = outside[0]
        c = exitcodes[r]
        if c < 0:
            head = (f"rank {r} was killed by {signal.Signals(-c).name}, a signal distlab did not send (a user, the "
                    f"out-of-memory killer or the scheduler)")
        else:
            head = f"rank {r} exited{code(r)} without an error message"
        if waiting:
            head += f"; rank(s) {', '.join(map(str, waiting))} then lost their connection to it"
    elif hung and waiting:
        r = hung[0]
        head = f"rank {r} did not arrive: it stopped responding (hung) while {waited}"
    else:
        r = (silent or waiting or [min(exitcodes, default=0)])[0]
        head = f"rank {r} exited{code(r)}" + (f": {exits[r][1]}" if exits.get(r) else " without an error message")
    log = run_dir / f"rank{r}.log"
    tail = _tail(log, start=logs_at.get(log.name, 0))
    if not tail:
        return head + ("" if log.exists() else f" (it has no {log.name}: it failed before it could write one)")
    return f"{head}; see {log}, last lines:\n{tail}"
