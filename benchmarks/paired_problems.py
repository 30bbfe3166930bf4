#!/usr/bin/env python3
"""Paired comparisons from the per-problem files ``distlab eval`` writes, split by task family.

A gain on a whole evaluation set can hide a rise in one family and a fall in another, and two arms (GRPO and its
shuffled-reward control) are compared on the same problems only through their per-problem results. Each ARM=FILE
names an eval ``problems.json`` (``{"before": [...], "after": [...]}``, rows with ``task_id`` and ``greedy``), or
ARM=BEFORE,AFTER two per-problem files a training run wrote (its evaluation at the start and at the end). For
every arm: base -> trained, overall, per family (the second part of a synthetic ``task_id``) and per ``--group``;
for every later arm: the first arm's trained policy against it, on the same rows. Intervals and p-values are
McNemar's exact ones (:func:`distlab.recipes.lm.eval.passk.paired_comparison`).

    python3 benchmarks/paired_problems.py grpo=grpo_problems.json control=control_problems.json \\
        --group weak=count_list,affine,less_than [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from distlab.recipes.lm.eval.passk import paired_comparison

Rows = list[dict[str, Any]]


class Refused(Exception):
    """A bad argument or file, said in one line."""


def family(task_id: str) -> str:
    parts = task_id.split("/")
    return parts[1] if len(parts) > 2 else parts[0]


def _rows(path: str) -> Rows:
    """One evaluation's rows, as a training run writes them (``<split>_step<N>_problems.json``: a list)."""
    try:
        rows = json.loads(Path(path).read_text())
        if not isinstance(rows, list) or not all("task_id" in r and "greedy" in r for r in rows):
            raise TypeError("not a list of rows with task_id and greedy")
    except (OSError, ValueError, TypeError) as exc:
        raise Refused(f"{path}: not a run's per-problem evaluation file ({exc})") from None
    return rows


def load(spec: str) -> tuple[str, Rows, Rows]:
    """``NAME=FILE`` (``distlab eval``'s problems.json, before and after in one file) or ``NAME=BEFORE,AFTER``
    (two per-problem files of one training run: its evaluation at the start and at the end)."""
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise Refused(f"'{spec}': give each arm as NAME=FILE (a problems.json that distlab eval wrote) or "
                      f"NAME=BEFORE,AFTER (a run's first and last *_problems.json)")
    if "," in path:
        first, _, last = path.partition(",")
        before, after = _rows(first), _rows(last)
        path = last
    else:
        try:
            data = json.loads(Path(path).read_text())
            before, after = data["before"], data["after"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise Refused(f"{path}: not a distlab eval problems.json with 'before' and 'after' ({exc})") from None
    if [r["task_id"] for r in before] != [r["task_id"] for r in after]:
        raise Refused(f"{path}: 'before' and 'after' list different problems; re-run distlab eval")
    return name, before, after


def parse_groups(specs: list[str]) -> dict[str, set[str]]:
    groups = {}
    for spec in specs:
        name, sep, fams = spec.partition("=")
        if not sep or not name or not fams.strip(","):
            raise Refused(f"--group '{spec}': give NAME=FAMILY,FAMILY")
        groups[name] = {f for f in fams.split(",") if f}
    return groups


def compare(base: Rows, cand: Rows, keep: set[str] | None) -> dict[str, Any]:
    pick = [i for i, r in enumerate(base) if keep is None or family(r["task_id"]) in keep]
    cmp = paired_comparison([base[i]["greedy"] for i in pick], [cand[i]["greedy"] for i in pick])
    return cmp.to_dict()


def subsets(rows: Rows, groups: dict[str, set[str]]) -> dict[str, set[str] | None]:
    fams = sorted({family(r["task_id"]) for r in rows})
    out: dict[str, set[str] | None] = {"all": None}
    out.update({f"group {g}": s for g, s in groups.items()})
    if len(fams) > 1:
        out.update({f: {f} for f in fams})
    return out


def analyse(arms: list[tuple[str, Rows, Rows]], groups: dict[str, set[str]]) -> list[dict[str, Any]]:
    known = {family(r["task_id"]) for _, before, _ in arms for r in before}
    for g, fams in groups.items():
        if fams - known:
            raise Refused(f"--group {g}: no problem of family {', '.join(sorted(fams - known))}; "
                          f"the files hold {', '.join(sorted(known))}")
    first_name, _, first_after = arms[0]
    out = []
    for name, before, after in arms:
        for label, keep in subsets(before, groups).items():
            out.append({"comparison": f"{name}: base -> trained", "subset": label, **compare(before, after, keep)})
    for name, before, after in arms[1:]:
        if [r["task_id"] for r in after] != [r["task_id"] for r in first_after]:
            raise Refused(f"arms {first_name} and {name} were evaluated on different problems; use the same "
                          "task.eval_* settings")
        for label, keep in subsets(before, groups).items():
            out.append({"comparison": f"{first_name} vs {name}, trained", "subset": label,
                        **compare(after, first_after, keep)})
    return out


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| comparison | subset | n | from | to | change [95%] | fixed / broken | p |", "|---|---|---:|---:|---:|---|---|---:|"]
    for r in rows:
        p = r["mcnemar_p"]
        lines.append(f"| {r['comparison']} | {r['subset']} | {r['n_problems']} | {100 * r['mean_baseline']:.1f}% | "
                     f"{100 * r['mean_candidate']:.1f}% | {100 * r['diff']:+.1f} [{100 * r['low']:+.1f}, "
                     f"{100 * r['high']:+.1f}] | {r['candidate_only']} / {r['baseline_only']} | "
                     f"{'-' if p is None else f'{p:.2g}'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("arms", nargs="+", metavar="NAME=FILE", help="an arm's eval problems.json, or BEFORE,AFTER: a "
                    "run's first and last *_problems.json; the first arm is the candidate the others are compared with")
    ap.add_argument("--group", action="append", default=[], metavar="NAME=FAM,FAM", help="a named set of families")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    try:
        rows = analyse([load(s) for s in args.arms], parse_groups(args.group))
    except Refused as exc:
        print(f"paired_problems.py: {exc}", file=sys.stderr)
        return 2
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
