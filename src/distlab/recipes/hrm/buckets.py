"""Exact accuracy by puzzle difficulty (solver effort, path length, CSV rating).

One accuracy number hides whether a model solves hard puzzles or only the easy majority, so the
evaluation splits the test set into difficulty buckets of roughly equal size. Difficulties are
often small integers with heavy ties (most generated sudokus need 0-2 guesses), so bucket edges are
observed values and a value never straddles two buckets; when there are no more distinct values
than buckets, each value is its own bucket.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from distlab.atomic import atomic_save_figure
from distlab.errors import DistlabError

UNKNOWN = "unknown"


def _bucket_ids(values: np.ndarray, n_buckets: int) -> np.ndarray:
    """Bucket index per value; right-closed intervals between observed-value quantiles."""
    distinct = np.unique(values)
    if len(distinct) <= n_buckets:
        return np.searchsorted(distinct, values)
    inner = np.quantile(values, np.arange(1, n_buckets) / n_buckets, method="inverted_cdf")
    return np.searchsorted(np.unique(inner), values, side="left")


def _row(label: str, lo: float | None, hi: float | None, correct: np.ndarray,
         blank: tuple[np.ndarray, np.ndarray] | None) -> dict:
    row = {"bucket": label, "lo": lo, "hi": hi, "count": int(len(correct)),
           "exact_accuracy": float(correct.mean()) if len(correct) else float("nan")}
    if blank is not None:
        right, total = blank
        row["blank_accuracy"] = float(right.sum() / total.sum()) if total.sum() else float("nan")
        row["blank_cells"] = int(total.sum())
    return row


def accuracy_by_difficulty(difficulty: np.ndarray, correct: np.ndarray, n_buckets: int = 5,
                           blank: tuple[np.ndarray, np.ndarray] | None = None) -> list[dict]:
    """Rows ``{"bucket": "lo-hi", "lo", "hi", "count", "exact_accuracy"}``, easiest first.

    ``lo``/``hi`` are the smallest and largest difficulty seen in the bucket. Examples with NaN
    difficulty (datasets that do not record it) form one last ``"unknown"`` row (lo/hi None).
    ``blank``: per example, the cells to work out that it got right and their number; each row then also
    holds ``blank_accuracy``, which still separates models while none solves a whole hard puzzle.
    """
    d = np.asarray(difficulty, dtype=np.float64).reshape(-1)
    c = np.asarray(correct).reshape(-1)
    if d.shape != c.shape:
        raise DistlabError(f"difficulty ({d.size}) and correct ({c.size}) need one value per example each")
    if not isinstance(n_buckets, (int, np.integer)) or n_buckets < 1:
        raise DistlabError(f"n_buckets must be a positive integer, got {n_buckets!r}")
    if np.any(np.isinf(d)):
        raise DistlabError("difficulty holds inf; use NaN for unknown difficulty")
    c = c.astype(bool)
    if blank is not None:
        blank = (np.asarray(blank[0]).reshape(-1), np.asarray(blank[1]).reshape(-1))
        if blank[0].shape != d.shape or blank[1].shape != d.shape:
            raise DistlabError(f"blank counts need one value per example ({d.size})")
    pick = (lambda sel: (blank[0][sel], blank[1][sel])) if blank is not None else (lambda sel: None)
    known = ~np.isnan(d)
    rows = []
    if known.any():
        where = np.flatnonzero(known)
        dk = d[where]
        ids = _bucket_ids(dk, n_buckets)
        for b in np.unique(ids):
            sel = where[ids == b]
            lo, hi = float(d[sel].min()), float(d[sel].max())
            rows.append(_row(f"{lo:g}-{hi:g}", lo, hi, c[sel], pick(sel)))
    if not known.all():
        rows.append(_row(UNKNOWN, None, None, c[~known], pick(~known)))
    return rows


def render_table(rows: list[dict]) -> str:
    """Markdown table for reports and logs."""
    lines = ["| difficulty | count | exact accuracy |", "|---|---:|---:|"]
    for r in rows:
        acc = r["exact_accuracy"]
        lines.append(f"| {r['bucket']} | {r['count']} | {'n/a' if math.isnan(acc) else f'{acc:.3f}'} |")
    return "\n".join(lines) + "\n"


def plot_buckets(rows: list[dict], path: str | os.PathLike, title: str = "exact accuracy by difficulty") -> Path:
    """Bar chart of accuracy per bucket, each bar labelled with its example count; written atomically.

    Uses the Agg canvas directly (no pyplot) so it is safe from trainer processes and headless nodes.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise DistlabError("plots need matplotlib; install it with: pip install matplotlib") from None
    if not rows:
        raise DistlabError("no buckets to plot: accuracy_by_difficulty got no examples")
    path = Path(path)
    fig = Figure(figsize=(max(4.0, 1.1 * len(rows) + 1.5), 3.6), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    acc = [0.0 if math.isnan(r["exact_accuracy"]) else r["exact_accuracy"] for r in rows]
    bars = ax.bar(range(len(rows)), acc, color="#4c72b0")
    for bar, r in zip(bars, rows, strict=True):
        ax.annotate(f"n={r['count']}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize="small")
    ax.set_xticks(range(len(rows)), [r["bucket"] for r in rows])
    ax.set_ylim(0, 1.1)
    ax.set_xlabel("difficulty")
    ax.set_ylabel("exact accuracy")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    return atomic_save_figure(fig, path, bbox_inches="tight")
