"""Learning curves of LM runs from their metrics.jsonl: reward, zero-variance groups, KL, entropy, length, clipping
(GRPO); for SCoRe runs (found by their ``acc_t1`` key) the turns' accuracies, delta, KL, hint length and guidance reward.

Several runs overlay on the same panels (a run beside its control arm, seeds side by side); ``LABEL=PATH`` names a
run's line, a bare path is labelled by its run folder.

    python3 benchmarks/plot_lm_curves.py RUN/metrics.jsonl OUT.png [--title TEXT]
    python3 benchmarks/plot_lm_curves.py grpo=A/metrics.jsonl control=B/metrics.jsonl OUT.png
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

SCORE_PANELS = (("acc_t1", "Acc@t1 (sampled, this step)"), ("acc_t2", "Acc@t2 (sampled, this step)"),
                ("delta_t1_t2", "delta(t1, t2)"), ("kl_t2", "KL of turn 2 to the reference"),
                ("hint_tokens", "hint length (tokens)"), ("guidance_reward", "guidance reward"))


def train_rows(path: Path) -> list[dict]:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    train = [r for r in rows if r.get("split") == "train"]
    for r in train:
        r["clip"] = r.get("clip_low_fraction", 0.0) + r.get("clip_high_fraction", 0.0)
    return train


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="[LABEL=]RUN/metrics.jsonl ..., then OUT.png")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    if len(a.runs) < 2:
        ap.error("give at least one metrics.jsonl and the output .png")
    *runs, out = a.runs
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5), sharex=True)
    panels = PANELS
    for spec in runs:
        label, _, path = spec.rpartition("=") if "=" in spec else (Path(spec).parent.name, "", spec)
        train = train_rows(Path(path))
        panels = SCORE_PANELS if train and "acc_t1" in train[0] else PANELS
        steps = [r["step"] for r in train]
        for ax, (key, _) in zip(axes.flat, panels):
            ax.plot(steps, [r.get(key, float("nan")) for r in train], lw=1, label=label, marker=".")
    for ax, (_, title) in zip(axes.flat, panels):
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("step")
    if len(runs) > 1:
        axes.flat[0].legend(fontsize=8)
    fig.suptitle(a.title, fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
