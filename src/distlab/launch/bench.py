"""``distlab bench scaling``: run the same job on 1, 2, ... devices and measure, never extrapolate.

Strong scaling: the global batch stays fixed, so the per-device batch shrinks as devices are added;
efficiency = speedup / devices. Each point is a real ``distlab train`` run whose steady-state
throughput (warm-up steps dropped) comes from its own ``metrics.jsonl``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from distlab.atomic import atomic_save_figure, atomic_write_json
from distlab.errors import DistlabError


def steady_median(values: Sequence[float], warmup_frac: float = 0.3) -> float:
    """Median of logged rates after the first ``warmup_frac`` of them (compilation and warm-up left out)."""
    return float(statistics.median(values[int(len(values) * warmup_frac):] or values[-1:]))


def steady_throughput(metrics_file: Path, warmup_frac: float = 0.3) -> dict[str, float]:
    """Median examples/s (and MFU, tokens/s) over the logged steps after the warm-up fraction."""
    rows = [json.loads(x) for x in metrics_file.read_text().splitlines()]
    key = "examples_per_s"
    if not any(key in r for r in rows):
        key = "env_steps_per_s"  # RL recipes count environment steps
    rows = [dict(r, examples_per_s=r[key]) for r in rows if r.get("split") == "train" and key in r]
    if not rows:
        raise DistlabError(f"{metrics_file} has no throughput rows; the run logged nothing (log.every too large?)")
    rows = rows[int(len(rows) * warmup_frac):] or rows[-1:]
    out = {"throughput": steady_median([r["examples_per_s"] for r in rows], 0.0)}
    for key in ("mfu", "tokens_per_s"):
        vals = [r[key] for r in rows if key in r]
        if vals:
            out[key] = steady_median(vals, 0.0)
    return out


def scaling_table(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add speedup and strong-scaling efficiency relative to the smallest count measured."""
    base = min(points, key=lambda p: p["devices"])
    per_device_base = base["throughput"] / base["devices"]
    for p in points:
        p["speedup"] = p["throughput"] / per_device_base if base["devices"] == 1 else p["throughput"] / base["throughput"]
        p["efficiency"] = p["throughput"] / (per_device_base * p["devices"])
    return points


def _device_name(kind: str) -> str:
    if kind == "gpus":
        import torch

        if torch.cuda.is_available():
            return f"{torch.cuda.device_count()}x {torch.cuda.get_device_name(0)}"
    import platform

    return f"CPU ({platform.machine()})"


def plot_scaling(points: list[dict[str, Any]], path: Path, title: str) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    n = [p["devices"] for p in points]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    a.plot(n, [p["speedup"] for p in points], "o-", label="measured")
    a.plot(n, n, "--", color="gray", label="linear")
    a.set_xlabel("devices"), a.set_ylabel("speedup"), a.legend(), a.set_xticks(n)
    b.bar([str(x) for x in n], [100 * p["efficiency"] for p in points])
    b.set_xlabel("devices"), b.set_ylabel("strong-scaling efficiency (%)"), b.set_ylim(0, 110)
    fig.suptitle(title)
    fig.tight_layout()
    atomic_save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


def run_scaling(recipe: str, counts: list[int], kind: str, overrides: list[str], out_dir: Path,
                presets: list[str]) -> Path:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    points = []
    for n in counts:
        name = f"bench-{recipe}-{kind}{n}-{stamp}"
        cmd = [sys.executable, "-m", "distlab.cli", "train", recipe, *sum((["--config", p] for p in presets), []),
               *overrides, f"run.name={name}", f"run.dir={out_dir / 'runs'}", "run.resume=never", "ckpt.every=0",
               "log.progress=false", f"--{kind}", str(n)]
        print(f"[bench] {recipe} on {n} {kind}: {' '.join(cmd[3:])}", flush=True)
        proc = subprocess.run(cmd)
        if proc.returncode != 0:
            raise DistlabError(f"the {n}-{kind} run failed (exit {proc.returncode}); see {out_dir / 'runs' / name}")
        point = {"devices": n, **steady_throughput(out_dir / "runs" / name / "metrics.jsonl")}
        points.append(point)
        print(f"[bench] {n} {kind}: {point['throughput']:.1f} examples/s", flush=True)
    from distlab.run.rundir import git_commit  # here, not at the top: rundir imports torch, `distlab --help` must not

    result = {"recipe": recipe, "kind": kind, "device": _device_name(kind), "overrides": overrides,
              "presets": presets, "command": "distlab " + " ".join(sys.argv[1:]), "commit": git_commit(),
              "date": stamp, "results": [dict(p, gpus=p["devices"]) for p in scaling_table(points)]}
    out = out_dir / f"{recipe}_scaling_{stamp}.json"
    atomic_write_json(out, result)
    plot_scaling(points, out.with_suffix(".png"), f"{recipe}: strong scaling on {result['device']}")
    _print_table(result)
    return out


def _print_table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{result['recipe']} scaling on {result['device']}")
    for col in ("devices", "examples/s", "speedup", "efficiency", "MFU"):
        t.add_column(col, justify="right")
    for p in result["results"]:
        mfu = f"{100 * p['mfu']:.1f}%" if "mfu" in p else "-"
        t.add_row(str(p["devices"]), f"{p['throughput']:.1f}", f"{p['speedup']:.2f}x", f"{100 * p['efficiency']:.1f}%",
                  mfu)
    Console().print(t)


def _counts(text: str) -> list[int]:
    try:
        counts = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise DistlabError(f"device counts must be a comma list like 1,2,4,8, got '{text}'") from None
    if not counts or counts[0] < 1:
        raise DistlabError(f"device counts must be >= 1, got '{text}'")
    return counts


def cmd_scaling(a: argparse.Namespace, extra: list[str]) -> int:
    if (a.gpus is None) == (a.procs is None):
        raise DistlabError("give exactly one of --gpus 1,2,4,8 (CUDA) or --procs 1,2 (CPU)")
    kind, counts = ("gpus", _counts(a.gpus)) if a.gpus else ("procs", _counts(a.procs))
    bad = [e for e in extra if "=" not in e]
    if bad:
        raise DistlabError(f"unexpected arguments {' '.join(bad)}; pass recipe settings as key=value")
    if kind == "gpus":
        from distlab.training.wrap import check_gpus_available

        check_gpus_available(max(counts))
    out = run_scaling(a.recipe, counts, kind, extra, Path(a.out), a.config)
    print(f"wrote {out}")
    return 0


def register(subparsers: Any) -> None:
    b = subparsers.add_parser("bench", help="measure throughput and scaling (distlab bench scaling hrm --gpus 1,2)")
    bs = b.add_subparsers(dest="bench", metavar="BENCH")
    s = bs.add_parser("scaling", help="same job at several device counts: throughput, speedup, efficiency, MFU")
    s.add_argument("recipe")
    s.add_argument("--gpus", help="comma list of GPU counts, e.g. 1,2,4,8")
    s.add_argument("--procs", help="comma list of CPU process counts, e.g. 1,2")
    s.add_argument("--config", action="append", default=[])
    s.add_argument("--out", default="distributed_results")
    s.set_defaults(func=cmd_scaling)
