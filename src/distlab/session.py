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
from distlab.checkpoint import CheckpointManager
from distlab.config import BaseConfig, Resume, to_yaml
from distlab.dist import Runtime
from distlab.errors import DistlabError
from distlab.logs import MetricLogger, Progress, Throughput, peak_flops
from distlab.wrap import autocast, no_sync, set_fast_math, wrap_model

log = logging.getLogger("distlab")


class Session:
    def __init__(self, cfg: Any, rt: Runtime, recipe: str, run_dir: Path, scaling: list[dict] | None = None):
        self.cfg: BaseConfig = cfg
        self.rt = rt
        self.recipe = recipe
        self.run_dir = Path(run_dir)
        self.scaling = scaling or []
        self.ckpt = CheckpointManager(self.run_dir / "checkpoints", rt, cfg.ckpt.keep_last, cfg.ckpt.async_save,
                                      cfg.ckpt.verify)
        self.metrics = MetricLogger(self.run_dir, rt.is_main, cfg.log, cfg.run.name,
                                    config={"yaml": to_yaml(cfg)} if rt.is_main else None)
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

    # -- checkpoints ------------------------------------------------------------------------
    def restore(self, model: nn.Module, optimizers: list[torch.optim.Optimizer]) -> dict | None:
        """Resume per ``run.resume``: returns the saved extra state, or None for a fresh start."""
        resume = Resume(self.cfg.run.resume)
        has = bool(self.ckpt.steps())
        if resume == Resume.never and has:
            raise DistlabError(f"{self.run_dir} already has checkpoints and run.resume=never; pick another "
                               f"run.name or use run.resume=auto")
        if resume == Resume.never:
            return None
        extra = self.ckpt.restore(model, optimizers)
        if extra is None and resume == Resume.must:
            raise DistlabError(f"run.resume=must but {self.ckpt.root} holds no usable checkpoint")
        return extra

    def save(self, step: int, model: nn.Module, optimizers: list[torch.optim.Optimizer], extra: dict,
             rank_state: dict | None = None) -> None:
        self.ckpt.save(step, model, optimizers, dict(extra, recipe=self.recipe, config=to_yaml(self.cfg)),
                       rank_state)

    def due(self, step: int) -> bool:
        every = self.cfg.ckpt.every
        return every > 0 and step % every == 0

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
