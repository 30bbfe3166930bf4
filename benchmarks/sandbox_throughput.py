"""Programs per second through the sandbox: MBPP's reference solutions against all of their tests.

Why: the judge/host split (the token never shares an interpreter with the program) costs a second process and a
round trip per use of a program's object; this is the figure to compare across commits on one machine.
Usage: python benchmarks/sandbox_throughput.py [N] [WORKERS]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from distlab.recipes.lm.sandbox import Sandbox

MBPP = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "mbpp" / "mbpp.jsonl"


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    rows = [json.loads(line) for line in MBPP.read_text().splitlines()[:n]]
    jobs = [(r["code"], "\n".join(r["test_list"]) + "\n") for r in rows]
    with Sandbox(workers=workers) as box:
        box.run_many(jobs[:10])  # warm the page cache and the slots
        start = time.perf_counter()
        results = box.run_many(jobs)
        seconds = time.perf_counter() - start
    print(f"passed {sum(r.passed for r in results)}/{len(results)}  {len(results) / seconds:.1f} programs/s "
          f"({workers} workers, isolation {box.isolation.level})")


if __name__ == "__main__":
    main()
