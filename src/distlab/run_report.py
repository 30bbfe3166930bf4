"""The few lines a person reads when a run ends: what happened, the final numbers, where things are, what next.

Why a core piece: every recipe ends the same way (status, steps, wall time, metrics in ``summary.json``), so
the closing block is built once from the summary, never per recipe.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from distlab.logs import human_duration, metrics_table


def closing_report(summary: dict[str, Any], run_dir: Path, wall_s: float, command: str | None) -> str:
    status, step = summary.get("status", "?"), summary.get("step")
    steps = summary.get("steps", step)
    head = f"run {run_dir.name} {status}: step {step} of {steps} in {human_duration(wall_s)}"
    rate = (summary.get("train") or {}).get("examples_per_s")
    if rate:
        head += f" ({rate:,.0f} examples/s at the last log)"
    lines = [head]
    final = summary.get("eval") if isinstance(summary.get("eval"), dict) else None
    if final:
        lines.append(metrics_table("final evaluation", final))
    plots = sorted(p.name for p in run_dir.glob("*.png"))
    lines.append(f"run directory: {run_dir} (summary.json, metrics.jsonl, train.log, checkpoints/"
                 + (", " + ", ".join(plots) if plots else "") + ")")
    if status == "completed":
        lines.append(f"evaluate again: distlab eval {shlex.quote(str(run_dir))}")
    elif command:
        lines.append(f"resume: {command}")
    return "\n".join(lines)
