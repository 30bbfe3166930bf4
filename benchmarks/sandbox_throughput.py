"""Programs per second through the sandbox: MBPP's reference solutions against all of their tests.

Why: the judge/host split (the token never shares an interpreter with the program) costs a second process and a
round trip per use of a program's object; this is the figure to compare across commits on one machine.
Usage: python benchmarks/sandbox_throughput.py [N] [WORKERS] [--each]
N = 0: every row of mbpp.jsonl. ``--each`` times the programs one at a time instead and prints the distribution and the
slowest five: the floor under ``sandbox.timeout_s`` that keeps every reference solution passing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from distlab.sandbox import Sandbox

MBPP = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "mbpp" / "mbpp.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, nargs="?", default=200, help="first N programs of mbpp.jsonl (0: all)")
    ap.add_argument("workers", type=int, nargs="?", default=2)
    ap.add_argument("--each", action="store_true", help="time each program alone: median, p99, max, slowest five")
    args = ap.parse_args()
    if args.n < 0 or args.workers < 1:
        ap.error(f"N must be 0 or more and WORKERS 1 or more, not {args.n} and {args.workers}")
    lines = MBPP.read_text().splitlines()
    rows = [json.loads(line) for line in (lines[:args.n] if args.n else lines)]
    jobs = [(r["code"], "\n".join(r["test_list"]) + "\n") for r in rows]
    if args.each:
        each(jobs, [f"mbpp/{r['task_id']}" for r in rows])
        return
    workers = args.workers
    with Sandbox(workers=workers) as box:
        box.run_many(jobs[:10])  # warm the page cache and the slots
        start = time.perf_counter()
        results = box.run_many(jobs)
        seconds = time.perf_counter() - start
    print(f"passed {sum(r.passed for r in results)}/{len(results)}  {len(results) / seconds:.1f} programs/s "
          f"({workers} workers, isolation {box.isolation.level})")


def each(jobs: list[tuple[str, str]], names: list[str]) -> None:
    """Every program alone (one worker, nothing beside it), with a generous limit so slow ones still finish."""
    times = []
    with Sandbox(workers=1, timeout_s=30.0) as box:
        box.run_many(jobs[:10])
        for (program, tests), name in zip(jobs, names):
            start = time.perf_counter()
            passed = box.run(program, tests).passed
            times.append((time.perf_counter() - start, name, passed))
    s = sorted(t for t, _, _ in times)
    print(f"passed {sum(p for _, _, p in times)}/{len(times)}; seconds per program: median "
          f"{statistics.median(s):.3f}, p99 {s[int(0.99 * (len(s) - 1))]:.3f}, max {s[-1]:.3f}")
    for t, name, passed in sorted(times, reverse=True)[:5]:
        print(f"  {name}: {t:.3f} s{'' if passed else ' (failed)'}")


if __name__ == "__main__":
    main()
