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
    return args + ["--module", "distlab.worker", *worker_args]


def preflight(recipe_name: str, presets: list[str], overrides: list[str], world_size: int,
              procs_per_node: int | None = None, show_only: bool = False, any_machine: bool = False):
    """Everything that can be checked before starting processes: schema, types, placement, data, divisibility.

    ``show_only`` (``--show-config``) stops after the config itself, so a config can be inspected
    before its dataset exists. ``any_machine`` (``doctor --recipe``, which plans runs for other machines too)
    does not hold the GPUs a placement names against the ones this machine has.
    """
    from distlab.placement import check_config

    recipe = load_recipe(recipe_name)
    cfg = resolve_config(recipe, presets, overrides)
    cfg, _ = finalize_config(recipe, cfg, world_size)
    if show_only:
        return recipe, cfg
    check_run_dir(cfg.run.dir, cfg.run.name)
    check_config(cfg, procs_per_node or world_size, None if any_machine else _visible_gpus())
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
    single = nproc * opts.nodes == 1 and opts.max_restarts == 0
    if not single and opts.master_port and opts.nodes == 1 and not port_is_free(opts.master_port):
        raise DistlabError(f"MASTER_PORT {opts.master_port} is busy; pick another --master-port")
    from distlab.rundir import RunLock

    run_dir = Path(cfg.run.dir) / cfg.run.name
    lock = RunLock(run_dir).acquire() if eval_checkpoint is None else None
    try:
        if single:
            return worker.main(worker_args)
        return _torchrun(nproc, opts, worker_args, run_dir, cfg.dist.timeout_s)
    finally:
        if lock is not None:
            lock.release()


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


class _Forwarder:
    """The launcher's SIGTERM/SIGINT/SIGUSR1 handler: ask every rank to checkpoint and stop.

    The ranks get SIGUSR1 (their "stop at the next step boundary" signal) and the launcher keeps
    supervising them until they exit. A second SIGINT/SIGTERM means "now": the ranks get SIGTERM
    (which, after the first, makes them leave at once) and torchrun's own shutdown takes over.
    """

    def __init__(self) -> None:
        self.first: int | None = None
        self.hard = 0

    def __call__(self, signum: int, frame) -> None:  # noqa: ARG002
        from torch.distributed.elastic.multiprocessing.api import SignalException

        if self.first is not None and signum != signal.SIGUSR1:
            self.hard += 1
            for pid in _child_pids():
                _kill(pid, signal.SIGTERM)
            raise SignalException(f"second {signal.Signals(signum).name}", sigval=signal.Signals(signum))
        if self.first is None:
            self.first = signum
            print(f"distlab: received {signal.Signals(signum).name}; asking the ranks to checkpoint and stop "
                  f"(send it again to stop at once)", file=sys.stderr)
        for pid in _child_pids():
            _kill(pid, signal.SIGUSR1)


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _torchrun(nproc: int, opts: LaunchOptions, worker_args: list[str], run_dir: Path, timeout_s: float) -> int:
    """Run the ranks under torchrun's agent, with signals forwarded and failures explained."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser
    from torch.distributed.run import run as torchrun

    from distlab.worker import LAUNCHER_PID_ENV

    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())
    # torchrun would turn SIGTERM/SIGINT into an exception that kills the ranks without a checkpoint;
    # leave it only the signals that should end the job at once, and handle the stop signals here
    forward = _Forwarder()
    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler as sh

    original_close = sh.SubprocessHandler.close

    def close_now(self, death_sig=None) -> None:  # noqa: ARG001
        """torchrun ends surviving ranks with SIGTERM and waits 30 s; our ranks treat SIGTERM as "checkpoint
        at the next step", and a SIGSTOPped rank cannot act on it at all, so after a failure end them now."""
        original_close(self, signal.SIGKILL)

    sh.SubprocessHandler.close = close_now
    argv = torchrun_args(nproc, opts, worker_args)
    argv.insert(0, "--signals-to-handle=SIGHUP,SIGQUIT")
    args = get_args_parser().parse_args(argv)
    try:
        torchrun(args)
    except ChildFailedError as exc:
        stopped = _preempted(run_dir, forward.first)
        if stopped:
            return stopped
        raise DistlabError(explain_failure({r: f.exitcode for r, f in exc.failures.items()}, run_dir,
                                           timeout_s)) from None
    except SignalException as exc:
        raise DistlabError(f"stopped at once by a second {exc.sigval.name}: no checkpoint was taken for the "
                           f"current step; rerun the same command to resume from the last one") from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.environ.pop(LAUNCHER_PID_ENV, None)
        sh.SubprocessHandler.close = original_close
    return _preempted(run_dir, forward.first) or 0


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
    print(f"distlab: run preempted by {signal.Signals(signum).name} at step {summary.get('step')}; checkpoint "
          f"saved in {run_dir}/checkpoints; rerun the same command to resume", file=sys.stderr)
    return 128 + signum


def _rank_exit(log: Path) -> tuple[str, str] | None:
    """``(kind, text)`` from the last ``exit:`` line a rank wrote before it ended, or None."""
    if not log.exists():
        return None
    found = None
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r"exit: (\w+): (.*)$", line)
        if m:
            found = (m.group(1), m.group(2))
    return found


def _tail(log: Path, n: int = 6) -> str:
    if not log.exists():
        return f"  (no {log.name}: the rank failed before the run directory was ready; its error is above)"
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-n:]
    return "\n".join(f"  | {ln[:300]}" for ln in lines)


def explain_failure(exitcodes: dict[int, int], run_dir: Path, timeout_s: float) -> str:
    """Name the rank that caused a failed job, not merely the first rank torchrun saw exit.

    A rank that crashed writes ``exit: crash`` or ``exit: error``; a rank that only lost its peers
    writes ``exit: peer``; a rank that hung, was stopped or was killed writes nothing. So: blame a
    crashed rank if there is one, else one that never recorded an exit, and quote its log's tail.
    """
    logs = sorted(run_dir.glob("rank*.log"), key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))
    ranks = sorted({int(re.sub(r"\D", "", p.stem)) for p in logs} | set(exitcodes))
    exits = {r: _rank_exit(run_dir / f"rank{r}.log") for r in ranks}
    crashed = [r for r in ranks if exits[r] and exits[r][0] in ("crash", "error")]
    silent = [r for r in ranks if exits[r] is None]
    waiting = [r for r in ranks if exits[r] and exits[r][0] == "peer"]

    def code(r: int) -> str:
        c = exitcodes.get(r)
        if c is None:
            return ""
        return f" (killed by {signal.Signals(-c).name})" if c < 0 else f" (exit code {c})"

    if crashed:
        r = crashed[0]
        head = f"rank {r} failed{code(r)}: {exits[r][1]}"
    elif silent and waiting:
        r = silent[0]
        head = (f"rank {r} did not arrive: it stopped responding (hung, stopped or killed){code(r)} while rank(s) "
                f"{', '.join(map(str, waiting))} waited {timeout_s:.0f} s (dist.timeout_s) for it")
    else:
        r = silent[0] if silent else min(exitcodes, default=0)
        head = f"rank {r} exited{code(r)}" + (f": {exits[r][1]}" if exits.get(r) else " without an error message")
    return f"{head}; see {run_dir}/rank{r}.log, last lines:\n{_tail(run_dir / f'rank{r}.log')}"
