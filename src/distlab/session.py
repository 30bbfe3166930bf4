"""One process's view of a run: resolved config, runtime, run directory, checkpoints, logging.

The worker builds a :class:`Session` on every rank and hands it to the recipe's ``train``; recipes
use it instead of touching process groups, files or signals themselves.
"""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from distlab.atomic import atomic_write_json
from distlab.checkpoint import CheckpointManager, TrainState
from distlab.config import BaseConfig, Resume, to_yaml
from distlab.dist import Runtime
from distlab.errors import DistlabError
from distlab.rundir import checkpoints_dir
from distlab.logs import MetricLogger, Progress, Throughput, peak_flops
from distlab.wrap import autocast, no_sync, set_fast_math, wrap_model

log = logging.getLogger("distlab")


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
        self.metrics = MetricLogger(self.run_dir, rt.is_main, cfg.log, cfg.run.name,
                                    config={"yaml": to_yaml(cfg)} if rt.is_main else None)
        self.state = TrainState()
        self.resumed: dict | None = None
        self._stop_signal = False
        self._t0 = time.monotonic()
        set_fast_math(rt, cfg.dist.tf32)

    # -- model helpers ----------------------------------------------------------------------
    def wrap(self, model: nn.Module, shard_modules: list[nn.Module] | None = None, find_unused: bool = False) -> nn.Module:
        return wrap_model(model, self.rt, self.cfg.dist, shard_modules, find_unused)

    def autocast(self):
        return autocast(self.rt, self.cfg.dist.precision)

    def no_sync(self, model: nn.Module, micro_step: int):
        """Skip gradient sync on every accumulation micro-step but the last."""
        return no_sync(model, micro_step < self.cfg.dist.grad_accum - 1)

    def progress(self, total: int, start: int = 0, unit: str = "step") -> Progress:
        return Progress(total, start, enabled=self.rt.is_main and self.cfg.log.progress, unit=unit)

    def throughput(self) -> Throughput:
        name = torch.cuda.get_device_name(self.rt.device) if self.rt.device.type == "cuda" else "cpu"
        return Throughput(self.rt.world_size, peak_flops(name, self.cfg.log.peak_tflops))

    # -- state and checkpoints ----------------------------------------------------------------
    def track_model(self, name: str, model: nn.Module, optimizers: list[torch.optim.Optimizer] = ()) -> None:
        """Register a trainable model and its optimizers for every checkpoint (frozen models: never)."""
        self.state.add_model(name, model, list(optimizers))

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
        """Resume everything registered, per ``run.resume``; returns the step to continue from (0 if fresh)."""
        resume = Resume(self.cfg.run.resume)
        has = bool(self.ckpt.steps())
        if resume == Resume.never and has:
            raise DistlabError(f"{self.run_dir} already has checkpoints and run.resume=never; pick another "
                               f"run.name or use run.resume=auto")
        if resume == Resume.never:
            return 0
        meta = self.ckpt.restore(self.state)
        if meta is None and resume == Resume.must:
            raise DistlabError(f"run.resume=must but {self.ckpt.root} holds no usable checkpoint")
        self.resumed = meta
        return int(self.counters["step"])

    def load_checkpoint(self, path: Path) -> dict:
        """Load a given checkpoint into the registered state (evaluation); returns its meta."""
        meta = self.ckpt.restore(self.state, path=Path(path))
        self.resumed = meta
        return meta

    def checkpoint(self, step: int, last: bool = False) -> bool:
        """Save if ``ckpt.every`` says so or ``last`` (final step, stop signal); True if it saved."""
        every = self.cfg.ckpt.every
        if self.eval_mode or not (last or (every > 0 and step % every == 0)):
            return False
        self.ckpt.save(step, self.state, {"recipe": self.recipe, "config": to_yaml(self.cfg)})
        return True

    # -- preemption ------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        """SIGUSR1 (SLURM's warning signal) asks for a checkpoint at the next step boundary."""

        def handler(signum, frame):  # noqa: ARG001
            self._stop_signal = True
            log.warning("received signal %d: will checkpoint and stop at the next step", signum)

        signal.signal(signal.SIGUSR1, handler)

    def stop_check(self, step: int) -> tuple[bool, bool]:
        """``(stop_requested, time_up)``, agreed by all ranks in one collective per step.

        Stop: SIGUSR1 arrived on some rank or ``run.stop_at`` is reached (checkpoint, then exit).
        Time up: ``run.time_limit_s`` of wall time is spent on some rank (end training, evaluate).
        """
        limit = self.cfg.run.time_limit_s
        over = bool(limit) and time.monotonic() - self._t0 > limit
        signalled, time_up = self.rt.any_flags(self._stop_signal, over)
        return signalled or bool(self.cfg.run.stop_at and step >= self.cfg.run.stop_at), time_up

    def stop_requested(self, step: int) -> bool:
        return self.stop_check(step)[0]

    # -- end --------------------------------------------------------------------------------
    def finish(self, summary: dict) -> None:
        self.ckpt.wait()
        if self.rt.is_main:
            atomic_write_json(self.run_dir / "summary.json", summary)
        self.metrics.close()
