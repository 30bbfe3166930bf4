"""Throughput against GPU count for each series of a scaling result file, with the ideal line of the first series.

    python3 benchmarks/plot_scaling.py docs/results/h100x4_2026-11-27b/hrm_scaling.json docs/img/hrm_scaling_h100x4.png

The file holds ``{"what": caption, "series": {label: {gpus: throughput}}}``; a figure a reader takes in faster than
the table beside it in docs/benchmarks.md, which stays the record.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from distlab.atomic import atomic_save_figure  # noqa: E402


def plot(data: dict, out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    first = None
    for label, points in data["series"].items():
        gpus = sorted(int(g) for g in points)
        ax.plot(gpus, [points[str(g)] for g in gpus], marker="o", label=label)
        first = first or (gpus, points)
    gpus, points = first
    base = points[str(gpus[0])] / gpus[0]
    ax.plot(gpus, [base * g for g in gpus], linestyle=":", color="grey", label="ideal (first series)")
    ax.set_xticks(sorted({int(g) for p in data["series"].values() for g in p}))
    ax.set_xlabel("GPUs")
    ax.set_ylabel("examples / s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(data.get("title", "strong scaling"), fontsize=10)
    fig.tight_layout()
    return atomic_save_figure(fig, out, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("result", type=Path)
    p.add_argument("out", type=Path)
    args = p.parse_args()
    print(plot(json.loads(args.result.read_text()), args.out))


if __name__ == "__main__":
    main()
