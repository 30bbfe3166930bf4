"""The few lines a person reads when a run ends: what happened, the final numbers, where things are, what next.

Why a core piece: every recipe ends the same way (status, steps, wall time, metrics in ``summary.json``), so
the closing block is built once from the summary, never per recipe.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from distlab.run.logs import human_duration, metrics_table


def closing_report(summary: dict[str, Any], run_dir: Path, wall_s: float, command: str | None) -> str:
    status, step = summary.get("status", "?"), summary.get("step")
    steps = summary.get("steps", step)
    unit = summary.get("step_unit", "step")  # PPO counts updates
    head = f"run {run_dir.name} {status}: {unit} {step} of {steps} in {human_duration(wall_s)}"
    if summary.get("stopped_in"):  # a stop that cut an evaluation short: the step count alone would hide it
        head += f" (stopped during {summary['stopped_in']})"
    rate = (summary.get("train") or {}).get("examples_per_s")
    if rate:
        head += f" ({rate:,.0f} examples/s at the last log)"
    lines = [head + skipped_note(summary)]
    final = summary.get("eval") if isinstance(summary.get("eval"), dict) else None
    if final:
        lines.append(metrics_table("final evaluation", final))
    plots = sorted(p.name for p in run_dir.glob("*.png"))
    lines.append(f"run directory: {run_dir} (summary.json, metrics.jsonl, train.log, checkpoints/"
                 + (", " + ", ".join(plots) if plots else "") + ")")
    # a recipe without `distlab eval` names its own way to judge a run, or none ("evaluate_with": None)
    evaluate_with = summary.get("evaluate_with", f"distlab eval {shlex.quote(str(run_dir))}")
    if status == "completed":
        if evaluate_with:
            lines.append(f"evaluate again: {evaluate_with}")
    elif command:  # a finished run has nothing to resume: the line is for runs that stopped early
        lines.append(f"resume: {command}")
    return "\n".join(lines)


def skipped_note(summary: dict[str, Any]) -> str:
    """``; N updates skipped ...`` for a recipe that counts updates skipped for an inf/NaN gradient (the LM
    recipes' ``skipped_steps``, 0 included: a reader comparing runs must see it), else nothing."""
    skipped = (summary.get("train") or {}).get("skipped_steps")
    if skipped is None:
        return ""
    where = " (the first one's micro-batches: nonfinite_*.pt in the run directory)" if skipped else ""
    return f"; {int(skipped)} update(s) skipped for an inf/NaN gradient norm{where}"
