#!/usr/bin/env python3
"""Seconds per step, steps per hour and peak memory per device of training runs, one JSON row per run, read from
each run's ``metrics.jsonl`` (a run folder, or a ``.jsonl`` copied out of one).

Device calls compare arms that ran side by side or one after the other (the one-GPU and the seed-004 placement,
the synchronous loop and its overlapped variants); every such table needs the same few numbers, taken the same
way: the median gap between consecutive training rows, so step 1 (start-up, compilation) falls out, beside the
mean of the phase timings the recipe logs. ``--vs NAME`` adds each run's speed against that run.

    python3 benchmarks/step_rates.py /tmp/runs/sync /tmp/runs/k1 --vs sync
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

PHASES = ("generate_s", "rollout_s", "reward_wait_s", "behaviour_logprobs_s", "ref_logprobs_s", "advantage_s",
          "update_s", "guidance_s")


def read_rows(path: Path) -> list[dict]:
    """The training rows of one run, in order."""
    f = path / "metrics.jsonl" if path.is_dir() else path
    rows = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    return [r for r in rows if r.get("split") == "train"]


def rates(name: str, train: list[dict]) -> dict:
    """One run's row: the median step (gaps between logged rows, per step logged), its phases and peaks."""
    out: dict = {"run": name, "steps": train[-1]["step"] if train else 0}
    gaps = [(b["time"] - a["time"]) / max(1, b["step"] - a["step"]) for a, b in zip(train, train[1:])]
    if gaps:
        out["median_step_s"] = round(statistics.median(gaps), 3)
        out["steps_per_hour"] = round(3600 / statistics.median(gaps), 1)
        out["gaps"] = len(gaps)
    for key in PHASES:
        values = [r[key] for r in train[1:] if isinstance(r.get(key), (int, float))]
        if values:
            out[key] = round(statistics.median(values), 3)
    for key in sorted({k for r in train for k in r if "peak" in k and "gib" in k and "/" not in k}):
        out[key] = round(max(r[key] for r in train if isinstance(r.get(key), (int, float))), 2)
    skipped = [r.get("skipped_steps") for r in train if isinstance(r.get("skipped_steps"), int)]
    out["skipped_steps"] = skipped[-1] if skipped else 0
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, help="run folders or metrics .jsonl files")
    p.add_argument("--vs", default="", help="the run (folder or file stem) others are compared with")
    a = p.parse_args(argv)
    rows = []
    for path in a.runs:
        if not (path / "metrics.jsonl" if path.is_dir() else path).is_file():
            print(json.dumps({"run": path.stem or path.name, "error": "no metrics.jsonl"}))
            continue
        rows.append(rates(path.stem if path.suffix == ".jsonl" else path.name, read_rows(path)))
    base = next((r for r in rows if r["run"] == a.vs), None)
    for r in rows:
        if base and base.get("median_step_s") and r.get("median_step_s"):
            r[f"speed_vs_{a.vs}"] = round(base["median_step_s"] / r["median_step_s"], 2)
        print(json.dumps(r))
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
