"""The code every rank runs: join the job, agree on one config, train, write the summary.

Started by torchrun (``python -m distlab.launch.worker``), by ``srun``, by ``accelerate launch`` or
in-process for a single local run.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

from distlab.config import composed_config, finalize_config, resolve_config, resolve_with_smoke, to_yaml
from distlab.errors import DistlabError, InRunError
from distlab.launch.handoff import ResolvedRun, read_handoff
from distlab.recipe import Recipe, load_recipe
from distlab.run.logs import log_metrics_table, setup_logging
from distlab.run.rundir import RunLock, checkpoints_dir, eval_dir, manifest, write_manifest
from distlab.runtime.dist import PeerLostError, Runtime, detect_env, init_runtime, shutdown
from distlab.training.session import Session, StopRequested, install_stop_handlers, stop_signal

log = logging.getLogger("distlab")
_HELD: list[RunLock] = []  # the run lock lives as long as this process
_AGREED: list[Any] = []  # this process's config once its job agreed on it (read by the out-of-memory report)
LAUNCHER_PID_ENV = "DISTLAB_LAUNCHER_PID"
EXIT_DIR_ENV = "DISTLAB_EXIT_DIR"  # the launcher's folder where each failing rank leaves its exit line
PEER_LOST = ("timed out", "timeout", "connection closed", "connection reset", "broken pipe", "connection refused",
             "did not reach", "left the job", "peer")


def die_with_parent() -> None:
    """Make the kernel kill this rank when its launcher dies, however it dies (SIGKILL included).

    Without this a rank whose torchrun/distlab parent was killed is re-parented to PID 1 and keeps
    training unattended, holding GPUs and writing into the run. ``PR_SET_PDEATHSIG`` is Linux-only;
    elsewhere a watchdog thread polls the parent pid instead.
    """
    import signal
    import threading

    parent = int(os.environ.get(LAUNCHER_PID_ENV, "0") or 0) or os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl")
    except (OSError, AttributeError):
        def watch() -> None:
            import time

            while os.getppid() == parent:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, name="distlab-parent-watch", daemon=True).start()
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(1)


def agree_config(recipe: Recipe, presets: list[str], overrides: list[str], handoff: Path | None = None
                 ) -> tuple[ResolvedRun, Any, Runtime]:
    """Join the job with one config on every rank, resolved once: by the launcher (``handoff``), else by rank 0.

    A rank must know ``dist.*`` to join before anything can be sent to it. With a hand-off every rank reads them
    there; without one rank 0 resolves the config and the others only compose it (no smoke settings, no checks, no
    run name) to read them. Once joined, every rank takes what rank 0 broadcasts. A config rank 0 refuses is refused
    on every rank with rank 0's line: rank 0 joins anyway, so no rank waits for it until the timeout.
    """
    run, refused, joining, smoke = None, None, None, None
    if handoff is not None:
        run = read_handoff(handoff)
        joining = run.config_of(recipe)
    elif detect_env().rank == 0:
        try:
            joining, smoke = resolve_with_smoke(recipe, presets, overrides)
        except DistlabError as exc:
            refused = str(exc)
    if joining is None:
        joining = composed_config(recipe, presets, overrides)
    d = joining.dist
    rt = init_runtime(d.backend, d.device, d.timeout_s, devices_per_rank=d.devices_per_rank)
    if rt.is_main and run is None and refused is None:
        cfg, scaling = finalize_config(recipe, joining, rt.world_size)
        run = ResolvedRun(to_yaml(cfg), scaling, smoke)
    run, refused = rt.broadcast_object((run, refused))
    if refused is not None:
        raise DistlabError(refused)
    return run, run.config_of(recipe), rt


def start_session(recipe: Recipe, presets: list[str], overrides: list[str], eval_output: Path | None = None,
                  handoff: Path | None = None) -> Session:
    """Join the job, agree on the config, prepare the run directory (or, for eval, its own output folder)."""
    run, cfg, rt = agree_config(recipe, presets, overrides, handoff)
    _AGREED[:] = [cfg]
    run_dir = Path(cfg.run.dir) / cfg.run.name if eval_output is None else Path(eval_output)
    if rt.is_main and eval_output is None:
        lock = RunLock(run_dir)
        if not lock.held_here():  # started by srun/torchrun directly: no distlab launcher holds it for us
            _HELD.append(lock.acquire())
    if rt.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(to_yaml(cfg))
        write_manifest(run_dir, manifest(rt, recipe.name, cfg.run.name, run.scaling))
    rt.barrier("run directory ready")
    setup_logging(run_dir, rt.rank)
    log.debug("start")
    for h in log.handlers:  # the pid goes to the rank's own file: fault-injection tools and people look there
        if getattr(h, "baseFilename", "").endswith(f"rank{rt.rank}.log"):
            h.handle(log.makeRecord(log.name, logging.INFO, __file__, 0, "rank %d pid=%d host=%s",
                                    (rt.rank, os.getpid(), os.uname().nodename), None))
    if rt.is_main:
        log.info("run %s: %s x %d (%s), dir %s", cfg.run.name, rt.device.type, rt.world_size, rt.launcher, run_dir)
        if run.smoke and eval_output is None:
            log.info("%s", run.smoke)
    ckpt_root = checkpoints_dir(Path(cfg.run.dir) / cfg.run.name)
    return Session(cfg, rt, recipe.name, run_dir, run.scaling, ckpt_root=ckpt_root, eval_mode=eval_output is not None)


def run(recipe_name: str, presets: list[str], overrides: list[str], eval_checkpoint: Path | None = None,
        eval_output: Path | None = None, handoff: Path | None = None) -> dict:
    recipe = load_recipe(recipe_name)
    if eval_checkpoint is not None and eval_output is None:
        eval_output = eval_dir(eval_checkpoint)
    session = start_session(recipe, presets, overrides, eval_output, handoff)
    ended = False
    try:
        if eval_checkpoint is not None:
            result = _evaluate(recipe, session, eval_checkpoint)
        else:
            try:
                result = recipe.train(session.cfg, session)
            except InRunError as exc:
                raise DistlabError(f"{exc}; {kept_note(session.run_dir, session.ckpt.root)}") from None
            session.finish(result)
        # all ranks tear down together: a rank that destroys its gloo group while rank 0 is still writing
        # results can be aborted by gloo's worker thread (SIGABRT, "terminate called without an active exception")
        session.rt.barrier("teardown")
        ended = True
        return result
    finally:
        # after a failure the process group is left alone: its peers may be gone or stopped, and tearing it
        # down can wait on them forever (see :func:`_leave`); :func:`main` ends the process instead
        if ended or not session.rt.distributed:
            shutdown(session.rt)


def kept_note(run_dir: Path, ckpt_root: Path) -> str:
    """What a run stopped by an :class:`InRunError` leaves and how to go on: its directory is kept on purpose (its
    checkpoints are the user's work), so the message says so, names what it holds, and gives both ways out."""
    held = [n for n in ("config.yaml", "train.log", "metrics.jsonl") if (run_dir / n).exists()]
    if any(run_dir.glob("rank*.log")):
        held.append("rank logs")
    steps = sorted(int(p.name[4:]) for p in (ckpt_root.glob("step*") if ckpt_root.is_dir() else ())
                   if p.is_dir() and p.name[4:].isdigit())
    held.append(f"checkpoints up to step {steps[-1]}" if steps else "no checkpoint yet")
    go_on = f"resume from step {steps[-1]}" if steps else "start again"
    return (f"the run directory {run_dir} is kept ({', '.join(held)}): fix the cause and rerun the same command "
            f"(run.name={run_dir.name}) to {go_on}, or delete it (rm -r {run_dir})")


def _evaluate(recipe: Recipe, session: Session, ckpt: Path) -> dict:
    """Eval mode: the run's own config, a given checkpoint, results into ``eval.json`` beside it."""
    if recipe.evaluate is None:
        raise DistlabError(f"recipe '{recipe.name}' has no evaluation")
    metrics = recipe.evaluate(session.cfg, session, ckpt)
    if session.rt.is_main:
        from distlab.atomic import atomic_write_json

        out = session.run_dir / "eval.json"
        atomic_write_json(out, {"checkpoint": str(ckpt), **metrics})
        log_metrics_table(f"eval of {ckpt.name}", metrics)
    session.metrics.close()
    return metrics


def worker_argv(recipe: str, presets: list[str], overrides: list[str], eval_checkpoint: Path | None = None,
                eval_output: Path | None = None, handoff: Path | None = None) -> list[str]:
    """The command line of one rank (what the launcher hands to torchrun); :func:`main` parses it. ``handoff``: the
    config the launcher resolved (:mod:`distlab.launch.handoff`), which the rank runs; the presets and overrides stay on the
    line to show what it runs."""
    flags = [x for p in presets for x in ("--config", p)]
    if handoff is not None:
        flags += ["--resolved", str(Path(handoff).resolve())]
    if eval_checkpoint is not None:
        flags += ["--eval", str(Path(eval_checkpoint).resolve())]
    if eval_output is not None:
        flags += ["--eval-output", str(Path(eval_output).resolve())]
    return [recipe, *flags, *overrides]


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="distlab.launch.worker", add_help=False)
    p.add_argument("recipe")
    p.add_argument("--config", action="append", default=[])
    p.add_argument("--eval", dest="eval_checkpoint", type=Path, default=None)
    p.add_argument("--eval-output", dest="eval_output", type=Path, default=None)
    p.add_argument("--resolved", dest="handoff", type=Path, default=None)
    a, a.overrides = p.parse_known_args(argv)
    return a


def main(argv: list[str] | None = None) -> int:
    """Run one rank; the exit status says how it ended (0 done, 2 user error, 1 crash, 128+N stopped by signal N).

    Every failure leaves one line on stderr and, once the rank has a log, an ``exit:`` line in
    ``rank<R>.log`` that the launcher reads to say which rank failed first and why.
    """
    a = _parse(list(sys.argv[1:] if argv is None else argv))
    _AGREED.clear()
    rank = os.environ.get("RANK", "0")
    if os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get(LAUNCHER_PID_ENV):
        die_with_parent()
    install_stop_handlers()  # before anything slow, so an early SIGTERM still ends in a clean stop
    # Every failure branch ends in _leave *inside* the except clause: the exception's traceback holds the
    # model (DDP's reducer, hence the gloo group), and freeing it at the end of the clause can deadlock
    # (see _leave); a rank of a multi-rank job must never outlive its error line.
    try:
        result = run(a.recipe, a.config, a.overrides, a.eval_checkpoint, a.eval_output, a.handoff)
    except DistlabError as exc:
        return _leave(_fail(rank, "peer" if isinstance(exc, PeerLostError) else "error", str(exc), 2))
    except torch.OutOfMemoryError:
        log.error("rank %s ran out of device memory", rank, exc_info=True)  # the trace: rank<R>.log only
        return _leave(_fail(rank, "error", _oom_line(a, rank), 1))
    except KeyboardInterrupt:
        return _leave(_fail(rank, "interrupted", "stopped by a second signal before a checkpoint could be taken",
                            130))
    except StopRequested:  # only `distlab eval` lets it out: training turns it into a preempted run
        import signal

        signum = stop_signal() or signal.SIGINT
        return _leave(_fail(rank, "interrupted", f"evaluation stopped by {signal.Signals(signum).name} before it "
                            f"finished; nothing written, run the same command again to evaluate", 128 + signum))
    except OSError as exc:
        from distlab.training.checkpoint import _no_space

        nospace = _no_space(exc, Path(exc.filename or "the run directory"))
        text = str(nospace) if nospace else f"{exc.strerror or exc}: {exc.filename or ''}".strip()
        return _leave(_fail(rank, "error", text, 2 if nospace else 1))
    except Exception as exc:
        log.error("rank %s failed: %s", rank, exc, exc_info=True)  # the trace: rank<R>.log only
        last = traceback.format_exc().strip().splitlines()[-1]
        kind = "peer" if any(w in str(exc).lower() for w in PEER_LOST) else "crash"
        return _leave(_fail(rank, kind, last, 1))
    signum = stop_signal()
    if signum is not None and isinstance(result, dict) and result.get("status") == "preempted":
        import signal

        name = signal.Signals(signum).name
        step = result.get("step")
        saved = ("checkpoint saved, rerun the same command to resume" if step else
                 "nothing trained yet, so nothing saved; rerun the same command to start again")
        msg = f"stopped by {name} at step {step}; {saved}"
        if rank == "0" and not os.environ.get(LAUNCHER_PID_ENV):
            print(f"distlab: {msg}", file=sys.stderr)
        _to_rank_log(rank, f"exit: preempted: {msg}")
        # under the distlab launcher a clean stop exits 0 so torchrun does not restart it; the launcher
        # reads summary.json and returns 128+N itself
        return 0 if os.environ.get(LAUNCHER_PID_ENV) else 128 + signum
    return 0


def _oom_line(a: argparse.Namespace, rank: str) -> str:
    """The one-line out-of-memory report (:func:`distlab.memory.oom.oom_message`) for this rank's config."""
    from distlab.memory.oom import oom_message

    try:
        recipe = load_recipe(a.recipe)
        # the config this rank runs; resolved here only for an out-of-memory error before the job agreed on one
        cfg = _AGREED[0] if _AGREED else resolve_config(recipe, a.config, a.overrides)
        return oom_message(recipe, cfg, rank)
    except Exception:
        return f"CUDA out of memory on rank {rank}; see `distlab doctor --recipe {a.recipe}` for the estimate"


def _to_rank_log(rank: str, text: str) -> None:
    """Write a line into ``rank<R>.log`` only (not the console), if this rank has a log yet."""
    for h in log.handlers:
        if getattr(h, "baseFilename", "").endswith(f"rank{rank}.log"):
            h.handle(log.makeRecord(log.name, logging.ERROR, __file__, 0, "%s", (text,), None))


def _fail(rank: str, kind: str, text: str, code: int) -> int:
    """One line for the user, one ``exit:`` line in the rank log for the launcher's diagnosis.

    The same ``kind: text`` also goes to the launcher's own exit folder (:data:`EXIT_DIR_ENV`), which
    does not live on the run's disk: a rank that failed because that disk is full still gets named
    with its reason.
    """
    _to_rank_log(rank, f"exit: {kind}: {text}")
    exits = os.environ.get(EXIT_DIR_ENV)
    if exits:
        try:
            Path(exits, f"rank{rank}-pid{os.getpid()}").write_text(f"{kind}: {text}\n")
        except OSError:
            pass
    prefix = "distlab: error:" if kind == "error" and rank == "0" else f"distlab: rank {rank}:"
    print(f"{prefix} {text}", file=sys.stderr)
    return code


def _leave(code: int) -> int:
    """Return ``code``, or, in a multi-rank job, end the process with it at once.

    A rank that failed (a collective timed out, a peer vanished, the disk filled) must not tear down its
    process group: the group's destructor joins gloo's worker thread while holding the GIL, and that
    thread may itself be waiting for the GIL to drop the timed-out operation, so the rank deadlocks
    after logging its error (seen with rank 0 SIGSTOPped: rank 1 hung for good, 2 runs in 5) and the job
    never ends. The error is already written and flushed (:func:`_fail`), nothing else is owed to a
    failed run, and the kernel drops the run lock, so leave without running destructors.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
