#!/usr/bin/env python3
"""Did the arms of a comparison make the same updates? One row per run, from its ``summary.json``.

A GRPO run and its shuffled-reward control are compared as "the same updates, different credit". Matched on wall
time they are not (the review of issue 47: 69 GRPO steps against 57 control steps, 2 of them skipped for an inf/NaN
gradient, so 55 updates). The device scripts therefore give every arm ``steps=N`` with ``run.time_limit_s`` only as
a guard; this table shows, per arm, steps done of steps asked, whether the guard cut it, the updates skipped for a
non-finite gradient and the updates made. ``--same`` exits 1 unless every arm reached its steps and all made the
same number of updates.

    python3 benchmarks/arm_updates.py [--same] grpo=/tmp/runs/qwen-grpo control=/tmp/runs/qwen-control
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path


class Refused(Exception):
    """A bad argument or file, said in one line."""


@dataclass(frozen=True)
class Arm:
    name: str
    step: int
    steps: int | None  # as asked; None for a summary written before it was kept
    time_limited: bool
    skipped: int | None  # updates skipped for an inf/NaN gradient norm; None when not counted

    @property
    def updates(self) -> int | None:
        return None if self.skipped is None else self.step - self.skipped


def load(spec: str) -> Arm:
    """``NAME=PATH``: PATH a run directory or its ``summary.json``."""
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise Refused(f"'{spec}': give each arm as NAME=RUN_DIR or NAME=SUMMARY.json")
    file = Path(path) / "summary.json" if Path(path).is_dir() else Path(path)
    try:
        summary = json.loads(file.read_text())
        step = int(summary["step"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise Refused(f"{file}: not a distlab summary.json with a 'step' ({exc})") from None
    skipped = (summary.get("train") or {}).get("skipped_steps")
    return Arm(name, step, summary.get("steps"), bool(summary.get("time_limited")),
               None if skipped is None else int(skipped))


def table(arms: list[Arm]) -> str:
    rows = [("arm", "steps", "time-limited", "skipped", "updates")]
    for a in arms:
        asked = "?" if a.steps is None else str(a.steps)
        rows.append((a.name, f"{a.step} of {asked}", "yes" if a.time_limited else "no",
                     "?" if a.skipped is None else str(a.skipped), "?" if a.updates is None else str(a.updates)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows)


def mismatch(arms: list[Arm]) -> str | None:
    """Why the arms are not matched on updates, in one line; None when they are."""
    cut = [a.name for a in arms if a.time_limited or (a.steps is not None and a.step < a.steps)]
    if cut:
        return f"{', '.join(cut)} stopped before steps (the time guard): run the train stage again to finish"
    updates = {a.name: a.updates for a in arms}
    if None in updates.values() or len(set(updates.values())) > 1:
        return "updates differ: " + ", ".join(f"{n} {'?' if u is None else u}" for n, u in updates.items())
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("arms", nargs="+", help="NAME=RUN_DIR or NAME=SUMMARY.json")
    p.add_argument("--same", action="store_true", help="exit 1 unless every arm made the same updates")
    args = p.parse_args(argv)
    try:
        arms = [load(spec) for spec in args.arms]
    except Refused as exc:
        print(exc, file=sys.stderr)
        return 2
    print(table(arms))
    why = mismatch(arms)
    if why:
        print(why)
    return 1 if args.same and why else 0


if __name__ == "__main__":
    sys.exit(main())
