"""Learning curves of an LM run from its metrics.jsonl: reward, zero-variance groups, KL, entropy, length, clipping.

    python3 benchmarks/plot_lm_curves.py RUN/metrics.jsonl OUT.png [--title TEXT]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PANELS = (("reward_mean", "reward (mean of G samples)"), ("zero_std_fraction", "groups with zero reward variance"),
          ("kl", "KL to the reference (k3, per token)"), ("entropy", "entropy (nats per token)"),
          ("completion_length", "completion length (tokens)"), ("clip", "clipped tokens (low + high)"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("metrics", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    rows = [json.loads(x) for x in a.metrics.read_text().splitlines() if x.strip()]
    train = [r for r in rows if r["split"] == "train"]
    for r in train:
        r["clip"] = r.get("clip_low_fraction", 0.0) + r.get("clip_high_fraction", 0.0)
    steps = [r["step"] for r in train]
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5), sharex=True)
    for ax, (key, label) in zip(axes.flat, PANELS):
        ax.plot(steps, [r[key] for r in train], lw=1)
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("step")
    fig.suptitle(a.title, fontsize=11)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(a.out)


if __name__ == "__main__":
    main()
