"""Report figures (PNG): learning curves with CI bands, bar charts with error bars, accuracy by difficulty.

Uses matplotlib's object API with the Agg canvas rather than pyplot, so making figures from a training
process, a thread or a headless node touches no global GUI state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from distlab.atomic import atomic_save_figure
from distlab.errors import DistlabError


def _figure(width: float = 7.0, height: float = 4.0):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise DistlabError("report plots need matplotlib; install it with: pip install matplotlib") from None
    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def save_png(fig, path: Path) -> Path:
    """Atomic like every other user-facing file: render to a sibling temp file, then rename."""
    return atomic_save_figure(fig, path, bbox_inches="tight")


def learning_curves(bands: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
                    path: Path, ylabel: str = "eval exact accuracy") -> Path:
    """One line per experiment (mean over seeds) with a shaded 95% CI band where it is defined."""
    fig = _figure()
    ax = fig.add_subplot()
    for name, (steps, mean, low, high) in bands.items():
        line, = ax.plot(steps, mean, marker="o", markersize=3, label=name)
        ok = np.isfinite(low) & np.isfinite(high)
        if ok.any():
            ax.fill_between(steps[ok], low[ok], high[ok], color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return save_png(fig, path)


def bar_chart(names: Sequence[str], means: Sequence[float], errors: Sequence[float], path: Path,
              ylabel: str, highlight: str | None = None) -> Path:
    """Mean per experiment with 95% CI error bars (no bar where the CI is undefined, e.g. one seed)."""
    fig = _figure(max(5.0, 0.7 * len(names) + 2), 4.0)
    ax = fig.add_subplot()
    x = np.arange(len(names))
    err = np.nan_to_num(np.asarray(errors, dtype=float), nan=0.0)
    colors = ["tab:orange" if n == highlight else "tab:blue" for n in names]
    ax.bar(x, np.nan_to_num(np.asarray(means, dtype=float)), yerr=err, capsize=4, color=colors)
    ax.set_xticks(x, names, rotation=30, ha="right", fontsize="small")
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    return save_png(fig, path)


def grouped_bars(groups: Sequence[str], series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                 path: Path, xlabel: str, ylabel: str) -> Path:
    """Accuracy per difficulty bucket (groups), one bar per experiment (series), with CI error bars."""
    fig = _figure(max(6.0, 1.2 * len(groups) + 3), 4.0)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(series))
    x = np.arange(len(groups))
    for i, (name, (means, errors)) in enumerate(series.items()):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, np.nan_to_num(np.asarray(means, dtype=float)), width,
               yerr=np.nan_to_num(np.asarray(errors, dtype=float)), capsize=2, label=name)
    ax.set_xticks(x, groups)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small")
    return save_png(fig, path)
