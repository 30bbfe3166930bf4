"""Refresh tests/durations.json, the measured seconds per test that the fast tier (``-m "not slow"``) is cut from.

    python3 -m pytest -q --junitxml=/tmp/junit.xml && python3 scripts/test_durations.py /tmp/junit.xml

Run it on a quiet machine after tests were added or made slower: a test measured above ``tests/markers.py``'s
threshold is marked ``slow``; a test not in the file yet is judged by what it does (processes, compilation).
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "durations.json"


def nodeid(case: ET.Element) -> str:
    """pytest's node id from a junit test case (classname ``tests.core.test_x`` plus ``name``)."""
    cls = case.get("classname", "")
    parts = cls.split(".")
    # a module's tests have classname "tests.pkg.test_mod"; a class's tests "tests.pkg.test_mod.TestX"
    for cut in range(len(parts), 0, -1):
        path = Path(*parts[:cut]).with_suffix(".py")
        if (OUT.parent.parent / path).exists():
            return "::".join([path.as_posix(), *parts[cut:], case.get("name", "")])
    return f"{cls}::{case.get('name', '')}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("junit", type=Path, help="the --junitxml file of a full run")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    cases = ET.parse(args.junit).getroot().iter("testcase")
    times = {nodeid(c): round(float(c.get("time", 0.0)), 2) for c in cases}
    args.out.write_text(json.dumps(dict(sorted(times.items())), indent=0) + "\n")
    print(f"{len(times)} tests, {sum(times.values()):.0f} s in all -> {args.out}")


if __name__ == "__main__":
    main()
