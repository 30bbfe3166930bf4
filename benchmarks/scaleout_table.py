"""Print the table of ``benchmarks/gpu_scaleout.sh``'s points: examples/s per job, and where profiled, the step's
wall time, the device's busy share, host waits and NCCL kernel time (from distlab's profile summary).

    python3 benchmarks/scaleout_table.py /tmp/scaleout     # or a folder unpacked from the stages' .tgz files
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rate(doc: dict) -> tuple[int, float]:
    """(GPUs, examples/s) of a `bench scaling` result or of the reference driver's JSON line."""
    if "results" in doc:
        point = doc["results"][0]
        return point["devices"], point["throughput"]
    return doc["gpus"], doc["examples_per_s"]


def main(root: Path) -> None:
    rows = []
    for path in sorted(root.rglob("*.json")):
        if path.name.endswith(".profile.json"):
            continue
        try:
            doc = json.loads(path.read_text() or "{}")
            gpus, throughput = rate(doc)
        except (ValueError, KeyError, IndexError):
            print(f"{path.stem}: no result")
            continue
        prof = path.with_name(path.stem + ".profile.json")
        extra = ""
        if prof.exists():
            p = json.loads(prof.read_text())
            nccl = p.get("kernel_ms_per_step", {}).get("communication (nccl)", 0.0)
            extra = (f"step {p['wall_ms_per_step']:.1f} ms, busy {100 * p.get('device_busy_fraction', 0):.0f}%, "
                     f"host waits {p.get('host_waits_per_step', float('nan')):.1f}/step "
                     f"({p.get('host_wait_ms_per_step', float('nan')):.1f} ms), nccl {nccl:.1f} ms")
        rows.append((path.stem, gpus, throughput, extra))
    print(f"{'job':<16} {'GPUs':>4} {'examples/s':>11}  profile (rank 0)")
    for name, gpus, throughput, extra in rows:
        print(f"{name:<16} {gpus:>4} {throughput:>11,.0f}  {extra}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/scaleout"))
