"""Add blank-cell accuracy per difficulty bucket to downloaded suite runs that predate it (issue 17's H200 runs).

Each run saved its final predictions (predictions.npz); this scores them against the test split again with the
evaluation's own functions and writes the rows into the run's summary.json -- only for copies of runs brought
back from a device, never for a live run. It first checks that the recomputed exact accuracy per bucket equals
what the run recorded, which proves the regenerated test split is the one the run was scored on.
Usage: python3 benchmarks/archive/rescore_buckets.py DATASET_DIR RESULTS_DIR [RESULTS_DIR ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from distlab.recipes.hrm.buckets import accuracy_by_difficulty
from distlab.recipes.hrm.data.format import load_split
from distlab.recipes.hrm.evaluation import blank_counts


def rescore(run: Path, split) -> None:
    summary = json.loads((run / "summary.json").read_text())
    pred = np.load(run / "predictions.npz")
    index, preds = pred["index"], pred["preds"].astype(np.int64)
    rows = accuracy_by_difficulty(split.difficulty[index], pred["exact"], blank=blank_counts(split, index, preds))
    old = summary["eval"]["by_difficulty"]
    assert [(r["bucket"], r["count"], r["exact_accuracy"]) for r in rows] == \
           [(r["bucket"], r["count"], r["exact_accuracy"]) for r in old], f"{run}: not the test split it was scored on"
    inputs, labels, _ = split.example_arrays()
    assert np.array_equal((preds == labels[index]).all(-1), pred["exact"]), f"{run}: labels differ"
    summary["eval"]["by_difficulty"] = rows
    (run / "summary.json").write_text(json.dumps(summary, indent=2))


def main(dataset: str, *results: str) -> None:
    split = load_split(Path(dataset), "test")
    runs = [p.parent for r in results for p in sorted(Path(r).glob("*/seed*/predictions.npz"))]
    for run in runs:
        rescore(run, split)
    print(f"rescored {len(runs)} runs")


if __name__ == "__main__":
    main(*sys.argv[1:])
