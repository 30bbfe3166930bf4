"""One process's view of a run: resolved config, runtime, run directory, checkpoints, logging.

The worker builds a :class:`Session` on every rank and hands it to the recipe's ``train``; recipes
use it instead of touching process groups, files or signals themselves.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from distlab.atomic import atomic_write_json
from distlab.config import BaseConfig, Resume, to_yaml
from distlab.errors import DistlabError
from distlab.memory.snapshot import MemorySnapshot
from distlab.run.logs import MetricLogger, Progress, Throughput, device_peak_memory, peak_flops, phase_progress
from distlab.run.profiling import StepProfiler, sync_phases
from distlab.run.report import closing_report
from distlab.run.rundir import checkpoints_dir, update_manifest
from distlab.runtime.dist import Runtime
from distlab.runtime.sampler import GlobalBatchSampler
from distlab.training.amp import MixedPrecision
from distlab.training.checkpoint import FROZEN_BASE_ATTR, CheckpointManager, TrainState
from distlab.training.wrap import autocast, no_sync, set_fast_math, unwrap, wrap_model

log = logging.getLogger("distlab")

# Signals that ask a rank to checkpoint at the next step boundary and exit: SLURM's warning signal,
# a scheduler's or ``kill``'s SIGTERM, and Ctrl-C (which a terminal sends to every rank at once).
STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)
_received: list[int] = []  # process-wide, so a signal that lands before the Session exists still counts


def _on_stop_signal(signum: int, frame: Any) -> None:  # noqa: ARG001
    """First signal: remember it (the training loop stops at its next boundary). Second SIGINT/SIGTERM:
    the user insists, so leave now without a checkpoint rather than ignore them."""
    # Ctrl-C reaches every rank *and* the launcher, which forwards SIGUSR1: that pair is one request
    if signum != signal.SIGUSR1 and any(s != signal.SIGUSR1 for s in _received):
        raise KeyboardInterrupt
    if not _received:
        log.warning("received %s: stopping at the next step boundary with a checkpoint (an evaluation under way "
                    "stops after its current chunk)", signal.Signals(signum).name)
    _received.append(signum)


def install_stop_handlers() -> None:
    """Route the stop signals to :func:`_on_stop_signal` (main thread only, as Python requires), and
    :data:`STACK_SIGNAL` to a dump of every thread's stack."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    for sig in STOP_SIGNALS:
        signal.signal(sig, _on_stop_signal)
    install_stack_dump()


# A rank that seems stuck (a step that never logs, a hang in a collective) is asked where it is without stopping it:
# ``kill -USR2 PID`` prints every thread's Python stack to its stderr. SIGUSR1 is taken (a stop request above).
STACK_SIGNAL = signal.SIGUSR2


def install_stack_dump() -> None:
    """Route :data:`STACK_SIGNAL` to :mod:`faulthandler`, which writes the stacks from C, even while the main thread
    is inside a long kernel call, a collective or a lock, where a Python handler would never run."""
    import faulthandler
    import sys

    stream = sys.__stderr__  # the process's fd 2: a test's captured sys.stderr has no file descriptor
    if stream is not None:
        faulthandler.register(STACK_SIGNAL, file=stream, all_threads=True, chain=False)


def stop_signal() -> int | None:
    """The first stop signal this process received, or None."""
    return _received[0] if _received else None


def stop_requested() -> bool:
    """Whether a stop signal arrived: a long phase between step boundaries (an evaluation) polls this between its
    chunks and gives up with :class:`StopRequested`, instead of making Ctrl-C wait for all of it."""
    return bool(_received)


class StopRequested(Exception):
    """A phase between step boundaries (an evaluation) was cut short by a stop signal, on every rank at the same
    point (the phase agrees on it in a collective it makes anyway). The step loop catches it, checkpoints the last
    finished step and ends the run as preempted; ``distlab eval`` ends without writing results."""


class Session:
    def __init__(self, cfg: Any, rt: Runtime, recipe: str, run_dir: Path, scaling: list[dict] | None = None,
                 ckpt_root: Path | None = None, eval_mode: bool = False):
        self.cfg: BaseConfig = cfg
        self.rt = rt
        self.recipe = recipe
        self.run_dir = Path(run_dir)  # in eval mode: the evaluation's own output folder, never the run
        self.scaling = scaling or []
        self.eval_mode = eval_mode
        self.ckpt = CheckpointManager(ckpt_root or checkpoints_dir(self.run_dir), rt, cfg.ckpt.keep_last,
                                      cfg.ckpt.async_save, cfg.ckpt.verify, create=not eval_mode)
        # dist.precision=fp16's loss scaling (a pass-through otherwise): every recipe's backward and optimizer
        # step go through it; with fp16 its scale is checkpointed and logged (amp/scale, amp/skipped_steps)
        self.amp = MixedPrecision(cfg.dist.precision, rt.device, init_scale=cfg.dist.loss_scale_init,
                                  growth_interval=cfg.dist.loss_scale_growth_interval)
        self.metrics = MetricLogger(self.run_dir, rt.is_main, cfg.log, cfg.run.name,
                                    config={"yaml": to_yaml(cfg)} if rt.is_main else None,
                                    extra=lambda: {**device_peak_memory(rt), **self.amp.metrics(),
                                                   **self._data_marks()})
        self.state = TrainState()
        self.saved_step: int | None = None  # the step of the checkpoint last written or restored: saved twice never
        self.stopped_in: str | None = None  # the phase a stop signal cut short ("eval at step 2"): in the summary
        if self.amp.enabled:  # optional: a checkpoint from a run in fp32/bf16 resumes with a fresh scale
            self.state.add("amp", self.amp, optional=True)
        self._t0 = time.monotonic()
        self.profiler = StepProfiler(self.run_dir / "profile", cfg.log.profile_steps, cfg.log.profile_wait, rt.device,
                                     enabled=rt.is_main and not eval_mode)
        sync_phases(rt.device if getattr(cfg.log, "sync_phases", False) else None)
        self._steps_here = 0  # steps this process has run (stop_check calls): the snapshot covers the first ones
        self.snapshot = MemorySnapshot(bool(getattr(cfg.log, "memory_snapshot", False)) and not eval_mode,
                                       rt.device, self.run_dir, rt.rank)
        set_fast_math(rt, cfg.dist.tf32)

    @contextlib.contextmanager
    def narrowed(self, rt: Runtime) -> Iterator[Session]:
        """Inside the block the session's collectives, checkpoints and wrapped models use ``rt`` (a
        :meth:`Runtime.subgroup` of the job, or a rank alone): for a recipe whose ranks take different roles. The
        job's Runtime comes back at the end, for what every rank does together after training (the summary, the
        teardown barrier)."""
        wide = self.rt
        self.rt = self.ckpt.rt = rt
        try:
            yield self
        finally:
            self.rt = self.ckpt.rt = wide

    # -- model helpers ----------------------------------------------------------------------
    def wrap(self, model: nn.Module, shard_modules: list[nn.Module] | None = None, find_unused: bool = False) -> nn.Module:
        return wrap_model(model, self.rt, self.cfg.dist, shard_modules, find_unused)

    def auto_micro_batch(self, model: nn.Module, per_rank: int, probe: Callable[[int], None]) -> int:
        """With ``dist.auto_micro_batch=true``, set ``dist.grad_accum`` so micro-batches are the largest that fit.

        ``probe(n)`` runs the recipe's forward and backward on ``n`` examples; gradients and the RNG state
        it leaves are discarded. The choice is recorded in ``manifest.json``. Returns ``dist.grad_accum``.
        Call it before :meth:`restore` (state that depends on the accumulation count is restored after).
        """
        if not self.cfg.dist.auto_micro_batch:
            return self.cfg.dist.grad_accum
        from distlab.training.micro_batch import choose_micro_batch

        def clean_probe(n: int) -> None:
            devices = [d for d in (self.rt.devices or [self.rt.device]) if d.type == "cuda"]
            with torch.random.fork_rng(devices=devices):
                try:
                    probe(n)
                finally:
                    model.zero_grad(set_to_none=True)

        plan = choose_micro_batch(per_rank, clean_probe, self.rt.device, self.rt)
        self.cfg.dist.grad_accum = plan["grad_accum"]
        if self.rt.is_main:
            update_manifest(self.run_dir, {"auto_micro_batch": plan})
        return plan["grad_accum"]

    def autocast(self):
        return autocast(self.rt, self.cfg.dist.precision)

    def no_sync(self, model: nn.Module, micro_step: int):
        """Skip gradient sync on every accumulation micro-step but the last."""
        return no_sync(model, micro_step < self.cfg.dist.grad_accum - 1)

    def progress(self, total: int, start: int = 0, unit: str = "step") -> Progress:
        """The step loop's progress (rank 0, ``log.progress``): count, rate, ETA and the metrics it is given."""
        return Progress(total, start, enabled=self.rt.is_main and self.cfg.log.progress, unit=unit)

    def phase(self, label: str, total: int, unit: str) -> Progress:
        """The progress of a phase inside or beside the step loop (an evaluation, a rollout), named ``label``: shown
        by rank 0 once it has lasted a few seconds (``log.progress``), so a long one is never silent. Use it as a
        context manager, so a phase cut short still takes its bar away. With several ranks the count is rank 0's
        share (its problems, its rollout), and the label says so."""
        label = f"{label} (rank 0 of {self.rt.world_size})" if self.rt.world_size > 1 else label
        return phase_progress(label, total, unit, enabled=self.rt.is_main and self.cfg.log.progress)

    def throughput(self) -> Throughput:
        name = torch.cuda.get_device_name(self.rt.device) if self.rt.device.type == "cuda" else "cpu"
        return Throughput(self.rt.world_size, peak_flops(name, self.cfg.log.peak_tflops))

    # -- state and checkpoints ----------------------------------------------------------------
    def track_model(self, name: str, model: nn.Module, optimizers: list[torch.optim.Optimizer] = ()) -> None:
        """Register a trainable model and its optimizers for every checkpoint (frozen models: never).

        Training whose host-resident gradients and optimizer states cannot fit in free memory is refused here,
        before the first step allocates them and the kernel kills the process without a word. A model whose
        loader named its frozen base (``FROZEN_BASE_ATTR``: a LoRA policy) is checkpointed without that base.
        """
        from distlab.memory.host import available_bytes, check_room, host_training_bytes

        check_room(name, host_training_bytes(list(optimizers), self.cfg.optim.state_dtype), self.rt.local_world_size,
                   available_bytes())
        self.state.add_model(name, model, list(optimizers), frozen_base=getattr(unwrap(model), FROZEN_BASE_ATTR, None))

    def _data_marks(self) -> dict[str, str]:
        """``data_digest`` in every metrics row: the last global batch of each tracked batch sampler, so a resumed
        run can be checked batch by batch against the uninterrupted one (``benchmarks/fault_drills.py``)."""
        samplers = [o for o in self.state.replicated.values() if isinstance(o, GlobalBatchSampler)]
        digests = [s.last_batch_digest() for s in samplers]
        return {"data_digest": "+".join(digests)} if any(digests) else {}

    def track(self, name: str, obj: Any, per_rank: bool = False) -> None:
        """Register anything with ``state_dict``/``load_state_dict`` (EMA, sampler, schedule, carry).

        ``per_rank`` state differs between ranks (a recurrent carry, environment states) and comes back
        only on the same world size; everything else is replicated and survives a change of world size.
        """
        self.state.add(name, obj, per_rank)

    @property
    def counters(self) -> dict[str, Any]:
        """Small JSON-able replicated values saved with every checkpoint (``step`` is always there)."""
        return self.state.counters

    def restore(self) -> int:
        """Resume everything registered, per ``run.resume``; returns the step to continue from (0 if fresh).

        Existing checkpoints of which none can be trusted stop the run instead of silently starting
        over at step 0 and overwriting them: that would discard the evidence and the work.
        ``run.resume=fresh`` is the explicit way to start again; the old checkpoints are moved aside.
        """
        resume = Resume(self.cfg.run.resume)
        steps = self.ckpt.steps()
        if resume == Resume.never and steps:
            raise DistlabError(f"{self.run_dir} already has checkpoints and run.resume=never; pick another "
                               f"run.name, or use run.resume=auto to continue or run.resume=fresh to start over")
        if resume == Resume.fresh:
            if steps and self.rt.is_main:
                aside = self.ckpt.discard_all()
                log.warning("run.resume=fresh: moved %d old checkpoint(s) to %s", len(steps), aside)
            self.rt.barrier("fresh start")
            return 0
        if resume == Resume.never:
            return 0
        meta = self.ckpt.restore(self.state)
        if meta is None and steps:
            problems = self.rt.broadcast_object(
                "; ".join(f"{d.name}: {self.ckpt.problem(d)}" for d in steps) if self.rt.is_main else None)
            raise DistlabError(f"every checkpoint in {self.ckpt.root} is unusable ({problems}); refusing to start "
                               f"over them. Restore them, or start again from step 0 with run.resume=fresh "
                               f"(the old ones are kept aside)")
        if meta is None and resume == Resume.must:
            raise DistlabError(f"run.resume=must but {self.ckpt.root} holds no usable checkpoint")
        if meta is not None:
            self.saved_step = int(self.counters["step"])
        return int(self.counters["step"])

    def load_checkpoint(self, path: Path) -> dict:
        """Load a given checkpoint into the registered state (evaluation); returns its meta."""
        return self.ckpt.restore(self.state, path=Path(path))

    def checkpoint(self, step: int, last: bool = False) -> bool:
        """Save if ``ckpt.every`` says so or ``last`` (final step, stop signal); True if it saved."""
        every = self.cfg.ckpt.every
        if self.eval_mode or not (last or (every > 0 and step % every == 0)):
            return False
        self.ckpt.save(step, self.state, {"recipe": self.recipe, "config": to_yaml(self.cfg)})
        self.saved_step = step
        return True

    # -- preemption ------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        """SIGUSR1/SIGTERM/SIGINT ask for a checkpoint at the next step boundary (see :data:`STOP_SIGNALS`)."""
        install_stop_handlers()

    @property
    def _stop_signal(self) -> bool:
        return stop_signal() is not None

    def stop_check(self, step: int) -> tuple[bool, bool]:
        """``(stop_requested, time_up)``, agreed by all ranks in one collective per step.

        Stop: SIGUSR1 arrived on some rank or ``run.stop_at`` is reached (checkpoint, then exit).
        Time up: ``run.time_limit_s`` of wall time is spent on some rank (end training, evaluate).
        """
        self._steps_here += 1
        self.snapshot.after_step(self._steps_here)
        limit = self.cfg.run.time_limit_s
        over = bool(limit) and time.monotonic() - self._t0 > limit
        signalled, time_up = self.rt.any_flags(self._stop_signal, over)
        return signalled or bool(self.cfg.run.stop_at and step >= self.cfg.run.stop_at), time_up

    def stop_or_end(self, step: int, steps: int) -> tuple[bool, int]:
        """``(stop, steps)`` after a step: a stop signal (checkpoint, then exit) or, once ``run.time_limit_s`` is
        spent, ``steps`` lowered to ``step`` so training ends normally and evaluates."""
        stop, time_up = self.stop_check(step)
        if time_up and step < steps:
            log.info("run.time_limit_s reached at step %d of %d: evaluating now", step, steps)
            steps = step
        return stop and step < steps, steps

    def end_step(self, step: int, steps: int) -> tuple[bool, int]:
        """The tail of every training step: agree on stopping, then checkpoint when due or last.

        Returns ``(stop, steps)``: ``stop`` asks the loop to leave now (a signal or ``run.stop_at``; the
        checkpoint is already written), and ``steps`` is the step count to train to, lowered to ``step``
        once ``run.time_limit_s`` is spent so training ends normally and evaluates. The recipe keeps
        ``steps`` in a local: its config stays what the user asked for.
        """
        stop, steps = self.stop_or_end(step, steps)
        # ckpt.at_end=false skips only the natural end (a benchmark's); a stop still saves so the run resumes
        self.checkpoint(step, last=stop or (step == steps and self.cfg.ckpt.at_end))
        return stop, steps

    # -- end --------------------------------------------------------------------------------
    def profile_step(self) -> None:
        """Once per training step: records ``log.profile_steps`` steps into ``<run>/profile/`` (rank 0)."""
        self.profiler.step()

    def finish(self, summary: dict) -> None:
        self.profiler.close()
        self.snapshot.close()
        self.ckpt.wait()
        # any rank may have been the one signalled; every rank learns which signal it was
        signum = next((x for x in self.rt.all_gather_object(stop_signal()) if x is not None), None)
        if signum is not None and summary.get("status") == "preempted":
            # said in the summary so that scripts and requeue logic can tell a signal from run.stop_at
            summary["stopped_by"] = signal.Signals(signum).name
        if self.stopped_in is not None and summary.get("status") == "preempted":
            summary["stopped_in"] = self.stopped_in
        if self.rt.is_main:
            atomic_write_json(self.run_dir / "summary.json", summary)
            log.info("%s", closing_report(summary, self.run_dir, time.monotonic() - self._t0,
                                          os.environ.get("DISTLAB_CMDLINE")))
        self.metrics.close()
