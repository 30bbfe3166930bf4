"""Issue 30: ``distlab doctor --recipe grpo|score`` within 15% of every peak measured on a GPU.

The measured rows are the raw results of ``benchmarks/lm_shapes.py`` kept under ``docs/results`` (H100 and H200,
2026-11-25/26); the doctor's memory model is arithmetic on the config, so each row's estimate is recomputed here
at this commit, on the CPU. A row counts once it ran two steps: Adam's states are created by the first optimizer
step, so a one-step run's peak is not the run's, unless FSDP2 keeps the states on the host (CPU offload). Rows that
crashed or ran out of memory have no peak to compare.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "benchmarks"))
import lm_shapes  # noqa: E402


def measured_rows() -> list[dict]:
    rows = []
    for path in sorted((ROOT / "docs" / "results").glob("*/*lm_shapes*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line) if line.strip() else {}
            steady = row.get("steps", 0) >= 2 or "dist.cpu_offload=true" in row.get("command", "")
            if row.get("peak_gib") and steady and not row["status"].startswith("exit"):
                rows.append({**row, "file": f"{path.parent.name}/{path.name}"})
    return rows


def test_every_measured_peak_is_within_15_percent_of_the_estimate():
    rows = measured_rows()
    assert len(rows) >= 23  # GRPO 1.5B and SCoRe 3B rows of five sessions: the check cannot pass empty
    errors = []
    for row in rows:
        args = [a for a in row["command"].split() if not a.startswith("--gpus") and a != "1"]
        estimate = lm_shapes.estimate_as_gpu(args)["cuda0"]
        peak = max(row["peak_gib"].values())
        errors.append((round(estimate / peak - 1, 3), row["case"], row["file"]))
    outside = [e for e in errors if abs(e[0]) > 0.15]
    assert not outside, outside
