"""Where a run's words and numbers go: console (rank 0), per-rank log files, metrics sinks, progress.

Metrics go to ``metrics.jsonl`` always (rank 0), and to TensorBoard / W&B when enabled; W&B defaults
to offline mode so a cluster without internet still records everything.
"""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from distlab.atomic import json_safe
from distlab.errors import DistlabError

log = logging.getLogger("distlab")

# Dense bf16 peak TFLOP/s per device (vendor figures, no sparsity); MFU is reported against these
# unless log.peak_tflops is set.
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0, "4090": 165.0}


class ConsoleFormatter(logging.Formatter):
    """Messages without their tracebacks: the console gets the one-line story, ``rank<N>.log`` keeps the trace."""

    def format(self, record: logging.LogRecord) -> str:
        saved = record.exc_info, record.exc_text, record.stack_info
        record.exc_info = record.exc_text = record.stack_info = None
        try:
            return super().format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved


class RunFileHandler(logging.FileHandler):
    """``rank<N>.log`` / ``train.log``: a log file that, once it cannot be written, goes quiet.

    The standard handler prints a "--- Logging error ---" traceback to stderr for *every* record it
    fails to write, so a full disk buried the one line that says so under a screen of tracebacks. This
    one stops writing after the first failure and says so in one line per process (once, for all of its
    files); the run's own error, if the disk stays full, comes after it.
    """

    _warned = False  # one line per process, however many files fail

    def __init__(self, path: Path, rank: int) -> None:
        self.rank = rank
        self.broken: OSError | None = None
        try:
            super().__init__(path)
        except OSError as exc:  # no room even to create the file: run without it (other errors stay errors)
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            logging.Handler.__init__(self)
            self.baseFilename, self.mode, self.encoding, self.errors = os.path.abspath(path), "a", None, None
            self.stream, self._closed = None, False
            self._fail(exc)

    def emit(self, record: logging.LogRecord) -> None:
        if self.broken is not None:
            return
        try:
            super().emit(record)
        except OSError as exc:  # FileHandler.emit reports through handleError; this catches what escapes
            self._fail(exc)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: ARG002
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            self._fail(exc)
        else:
            super().handleError(record)

    def _fail(self, exc: OSError) -> None:
        self.broken = exc
        stream, self.stream = self.stream, None
        if stream is not None:
            try:
                stream.close()  # the close flushes what is buffered: that fails the same way
            except OSError:
                pass
        if not RunFileHandler._warned:
            RunFileHandler._warned = True
            why = exc.strerror or str(exc)
            try:
                print(f"distlab: rank {self.rank}: cannot write {self.baseFilename} ({why}); its log lines are "
                      f"dropped from here on", file=sys.stderr, flush=True)
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        try:
            super().close()
        except OSError:
            pass


def setup_logging(run_dir: Path | None, rank: int, verbose: bool = False) -> None:
    """Rank 0 talks to the console; every rank writes ``rank<N>.log``; rank 0 also ``train.log``."""
    log.handlers.clear()
    log.setLevel(logging.DEBUG if verbose else logging.INFO)
    log.propagate = False
    fmt = logging.Formatter(f"%(asctime)s [rank{rank}] %(levelname)s %(message)s", "%H:%M:%S")
    if rank == 0:
        if sys.stderr.isatty():
            from rich.logging import RichHandler

            console = RichHandler(show_path=False, markup=False, rich_tracebacks=False, show_time=True)
            console.setFormatter(ConsoleFormatter("%(message)s"))
        else:  # redirected to a file or a pipe: whole lines, no 80-column wrapping
            console = logging.StreamHandler(sys.stderr)
            console.setFormatter(ConsoleFormatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
        log.addHandler(console)
    if run_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
        files = [run_dir / f"rank{rank}.log"] + ([run_dir / "train.log"] if rank == 0 else [])
        for path in files:
            h = RunFileHandler(path, rank)
            h.setFormatter(fmt)
            log.addHandler(h)


class MetricLogger:
    """Rank-0 metrics sink: JSON lines plus optional TensorBoard and W&B."""

    def __init__(self, run_dir: Path, enabled: bool, cfg: Any = None, run_name: str = "", config: dict | None = None,
                 extra: Callable[[], dict[str, Any]] | None = None):
        self.enabled = enabled
        self.extra = extra  # values added to every train row (the session's peak memory per device)
        self.path = run_dir / "metrics.jsonl"
        self._tb = self._wandb = None
        if not enabled:
            return
        self._f = open(self.path, "a")
        if cfg is not None and cfg.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise DistlabError("log.tensorboard=true needs tensorboard: pip install 'distlab[tensorboard]'") from None
            self._tb = SummaryWriter(str(run_dir / "tensorboard"))
        if cfg is not None and cfg.wandb:
            try:
                import wandb
            except ImportError:
                raise DistlabError("log.wandb=true needs wandb: pip install 'distlab[wandb]'") from None
            os.environ.setdefault("WANDB_MODE", cfg.wandb_mode)
            self._wandb = wandb.init(project=cfg.wandb_project, name=run_name, group=cfg.wandb_group,
                                     dir=str(run_dir), config=config, resume="allow", id=run_name,
                                     mode=cfg.wandb_mode)

    def log(self, step: int, metrics: dict[str, Any], split: str = "train") -> None:
        if not self.enabled:
            return
        if split == "train" and self.extra is not None:
            metrics = {**self.extra(), **metrics}
        row = json_safe({"step": step, "split": split, "time": time.time(), **metrics})  # NaN -> null: real JSON
        self._f.write(json.dumps(row, default=float, allow_nan=False) + "\n")
        self._f.flush()
        scalars = {f"{split}/{k}": v for k, v in row.items() if k in metrics and isinstance(v, (int, float))}
        if self._tb is not None:
            for k, v in scalars.items():
                self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)

    def close(self) -> None:
        if not self.enabled:
            return
        self._f.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def human_duration(seconds: float) -> str:
    """``42 s``, ``7 min 3 s``, ``3 h 50 min``: an ETA a person reads at a glance (not ``13786s``)."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def rate_text(rate: float, unit: str) -> str:
    """``12.09 step/s``, or ``42.1 s/update`` below one per second: a slow phase never reads ``0.00 update/s``."""
    if rate >= 1.0:
        return f"{rate:.2f} {unit}/s"
    if rate > 0.0:
        return f"{1.0 / rate:.1f} s/{unit}"
    return f"? {unit}/s"


class _SharedBar:
    """The one rich live display of this process, holding every bar that is open.

    Rich allows a single live display at a time, and an evaluation's bar opens inside the training loop's:
    both are tasks of this one display, which starts with the first bar and stops when the last one closes.
    """

    def __init__(self) -> None:
        self.rich: Any = None
        self.open = 0

    def add(self, description: str, total: int, completed: int, visible: bool) -> int:
        if self.rich is None:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self.rich = RichProgress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[rate]}"), TimeRemainingColumn(),
                                     TextColumn("{task.fields[info]}"), transient=False)
            self.rich.start()
        self.open += 1
        return self.rich.add_task(description, total=total, completed=completed, rate="", info="", visible=visible)

    def close(self, task: int, keep: bool) -> None:
        if not keep:
            self.rich.remove_task(task)
        self.open -= 1
        if self.open == 0:
            self.rich.stop()
            self.rich = None


_BAR = _SharedBar()


class Progress:
    """Progress of one phase with count, rate and ETA (rank 0): a rich bar on a terminal, a log line every
    ``every_s`` otherwise. Every long phase reports through this class (``Session.progress`` for the step loop,
    ``Session.phase`` or :func:`phase_progress` for evaluations, rollouts, backtests and probes), so they all look
    alike and nest: bars share one live display (:class:`_SharedBar`).

    ``quiet_s``: nothing is shown before the phase has run this long, so a phase of a second adds no noise and
    one of a minute is never silent. ``transient``: the bar goes when the phase closes (a phase inside training).
    ``label`` heads the line (default: the unit, as in ``step 5/100``).
    """

    def __init__(self, total: int, start: int = 0, enabled: bool = True, unit: str = "step", every_s: float = 10.0,
                 label: str | None = None, quiet_s: float = 0.0, transient: bool = False):
        self.total, self.done, self.unit, self.every_s = total, start, unit, every_s
        self.label, self.quiet_s, self.transient = label, quiet_s, transient
        self.enabled = enabled
        self._t0, self._n0, self._last = time.perf_counter(), start, 0.0
        self._printed: int | None = None  # the count on the last line printed: the same line is never printed twice
        self._task: int | None = None
        self._shown = quiet_s <= 0
        self.fields: dict[str, str] = {}
        if enabled and sys.stderr.isatty():
            self._task = _BAR.add(label or "train", total, start, visible=self._shown)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def rate(self) -> float:
        dt = time.perf_counter() - self._t0
        return (self.done - self._n0) / dt if dt > 0 else 0.0

    def eta_s(self) -> float:
        r = self.rate()
        return (self.total - self.done) / r if r > 0 else float("inf")

    def advance(self, n: int = 1, **info: Any) -> None:
        """Count ``n`` more done (a chunk of prompts, a day of trading)."""
        self.update(self.done + n, **info)

    def update(self, done: int, **info: Any) -> None:
        self.done = done
        if not self.enabled:
            return
        self.fields.update({k: (f"{v:.4g}" if isinstance(v, float) else str(v)) for k, v in info.items()})
        now = time.perf_counter()
        if not self._shown and now - self._t0 < self.quiet_s:
            return
        text = " ".join(f"{k}={v}" for k, v in self.fields.items())
        if self._task is not None:
            self._shown = True
            _BAR.rich.update(self._task, completed=done, rate=rate_text(self.rate(), self.unit), info=text,
                             visible=True)
        elif (now - self._last > self.every_s or done >= self.total) and done != self._printed:
            self._last, self._printed, self._shown = now, done, True
            self._emit(text)

    def line(self, text: str = "") -> str:
        """The plain-text progress line: ``eval_start: problem 40/200  3.10 problem/s  eta 52 s  info``."""
        eta = self.eta_s()
        head = f"{self.label}: {self.unit} " if self.label else f"{self.unit} "
        return (f"{head}{self.done}/{self.total}  {rate_text(self.rate(), self.unit)}  eta "
                f"{human_duration(eta) if eta != float('inf') else '?'}  {text}").rstrip()

    def _emit(self, text: str) -> None:
        """Through the ``distlab`` logger (a run's console and log files) or, where no command set it up (the
        doctor, a backtest), straight to stderr."""
        if log.handlers:
            log.info("%s", self.line(text))
        else:
            print(f"{time.strftime('%H:%M:%S')} {self.line(text)}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._task is not None:
            task, self._task = self._task, None
            _BAR.close(task, keep=not self.transient)


def phase_progress(label: str, total: int, unit: str, enabled: bool = True, quiet_s: float = 3.0,
                   every_s: float = 10.0) -> Progress:
    """The progress of a phase that may take long (an evaluation, a rollout, a backtest, a doctor probe): shown once
    it has run ``quiet_s`` seconds, then with count, rate and ETA (a line at most every ``every_s`` when not on a
    terminal), and gone from a terminal when it ends."""
    return Progress(total, 0, enabled=enabled, unit=unit, label=label, quiet_s=quiet_s, transient=True,
                    every_s=every_s)


def peak_flops(device_name: str, override_tflops: float | None) -> float | None:
    """Peak FLOP/s of one device for MFU, from the user's setting or the table; None if unknown."""
    if override_tflops:
        return override_tflops * 1e12
    for key, tf in PEAK_BF16_TFLOPS.items():
        if key in device_name:
            return tf * 1e12
    return None


class Throughput:
    """Examples/s, tokens/s and MFU over the steps since the last report."""

    def __init__(self, world_size: int, peak: float | None):
        self.world_size, self.peak = world_size, peak
        self._t = time.perf_counter()
        self._ex = self._tok = self._flops = 0.0

    def add(self, examples: float, tokens: float = 0.0, flops: float = 0.0) -> None:
        self._ex += examples
        self._tok += tokens
        self._flops += flops

    def report(self) -> dict[str, float]:
        now = time.perf_counter()
        dt = max(now - self._t, 1e-9)
        out = {"examples_per_s": self._ex / dt}
        if self._tok:
            out["tokens_per_s"] = self._tok / dt
        if self._flops and self.peak:
            out["mfu"] = self._flops / dt / (self.peak * self.world_size)
        self._t, self._ex, self._tok, self._flops = now, 0.0, 0.0, 0.0
        return out


def metrics_table(title: str, metrics: dict[str, Any]) -> str:
    """The numeric entries of ``metrics`` as a two-column text table (rich), for a person to read.

    Nested values (per-difficulty rows, task lists) and booleans are left out: they have their own files. A metric
    logged with its interval (``x``, ``x_low``, ``x_high``) is one row, ``x [low, high]``; large counts (FLOPs)
    are shown in 4 significant digits.
    """
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_header=True, header_style="bold", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    numbers = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    with_interval = {k for k in numbers if f"{k}_low" in numbers and f"{k}_high" in numbers}
    folded = {f"{k}_{end}" for k in with_interval for end in ("low", "high")}
    for key, value in numbers.items():
        if key in folded:
            continue
        text = _number(value)
        if key in with_interval:
            text += f" [{_number(numbers[key + '_low'])}, {_number(numbers[key + '_high'])}]"
        table.add_row(key, text)
    console = Console(width=100, record=True, file=io.StringIO(), color_system=None)
    console.print(table)
    return console.export_text().rstrip()


def _number(value: float | int) -> str:
    if isinstance(value, float) and value != value:
        return "n/a"
    if isinstance(value, float) or abs(value) >= 10**7:
        return f"{value:.4g}"
    return str(value)


def log_metrics_table(title: str, metrics: dict[str, Any]) -> None:
    """Log :func:`metrics_table` as one record, so the console and the run's log files get the same table."""
    log.info("%s", "\n" + metrics_table(title, metrics))


def peak_memory(rt) -> dict[str, float]:
    """Peak allocated memory (GiB) of each of this rank's GPUs since start; empty on a CPU run."""
    import torch

    if rt.device.type != "cuda":
        return {}
    return {f"peak_mem_gib_cuda{d.index}": torch.cuda.max_memory_allocated(d) / 2**30
            for d in (rt.devices or [rt.device])}


def mark_peak(rt, phase: str, into: dict[str, float]) -> None:
    """Put the running peak of this rank's GPU memory (GiB; of several GPUs the largest :func:`peak_memory` reads)
    at the end of ``phase`` into ``into`` as ``peak_gib_after/<phase>``. The peak never falls, so the first phase
    whose mark reaches the step's peak is the one that set it: where the memory goes, which a single peak per step
    cannot say. The LM recipes log the mean over ranks, as they do their phase times. Nothing on a CPU run."""
    peaks = peak_memory(rt)
    if peaks:
        into[f"peak_gib_after/{phase}"] = max(peaks.values())


def device_peak_memory(rt) -> dict[str, float]:
    """What every train row of metrics.jsonl carries: :func:`peak_memory` per GPU, or on a CPU run the
    process's peak resident memory (``peak_rss_gib``: the host is the device there)."""
    import resource

    if rt.device.type == "cuda":
        return peak_memory(rt)
    return {"peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30}
