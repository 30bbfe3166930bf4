#!/usr/bin/env python3
"""Why GRPO on MBPP did not carry over to HumanEval (issue 46 item 3), from the committed per-problem results.

The HumanEval evaluations of the GRPO run and its shuffled-reward control arm (docs/benchmarks.md, "GRPO on
Qwen2.5-Coder-0.5B, seed 1") kept, per problem, whether the greedy answer passed before and after training, not the
answer itself (``c`` is null). So the reply format, assert-style habits and logic errors cannot be read off the
answers. What can be established:

1. **What the recipe's own pipeline loses by reply format**: each HumanEval problem's canonical solution is written
   in the forms a chat model replies in (the whole function in a fence as asked, the function without the helper the
   prompt defined, only the body, the function in prose without a fence, the function followed by its own prints and
   a failing assert, the function restated with the docstring and imports) and judged exactly as evaluation judges
   it: :func:`distlab.recipes.lm.tasks.prompts.build_program` (chat mode, the extraction of
   :mod:`distlab.recipes.lm.tasks.extract`), then the sandbox. A form that fails with a correct solution inside is
   a format the pipeline drops.
2. **Per problem, which transition under GRPO** (fixed, broken, stayed failing, stayed passing) and whether the
   same transition also happened in arms that learned nothing for HumanEval (the control arm; SCoRe's three arms'
   turn-1 answers), which marks a flip of greedy decoding under any update rather than transfer.

    python3 benchmarks/transfer_causes.py [--run RUN_humaneval_problems.json.gz] [--control CONTROL_...json.gz]
        [--other NAME=FILE ...] [--json out.json]      # defaults: the committed files named below
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from distlab.recipes.lm.tasks import Task, build_program, load_humaneval
from distlab.sandbox import Sandbox

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
RUN = RESULTS / "h100x2_2026-11-26" / "qwen-grpo-seed1_humaneval_problems.json.gz"
CONTROL = RESULTS / "h100x2_2026-11-26" / "qwen-control-seed1_humaneval_problems.json.gz"
OTHERS = {f"score-{arm}": RESULTS / "h100x4_2026-11-26c" / f"score-{arm}_humaneval_problems.json.gz"
          for arm in ("none", "trained", "extrinsic")}
FENCE = "```python\n{}\n```"


class Refused(Exception):
    """A bad argument or file, said in one line."""


def read_outcomes(path: Path) -> tuple[dict[str, bool], dict[str, bool], bool]:
    """``(before, after, completions_saved)`` from an eval problems file (``greedy``, or SCoRe's turn-1 ``r1``)."""
    try:
        raw = path.read_bytes()
        data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        rows = {k: data[k] for k in ("before", "after")}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise Refused(f"{path}: not a distlab eval problems file with 'before' and 'after' ({exc})") from None
    key = "greedy" if "greedy" in rows["before"][0] else "r1"
    outcome = {k: {r["task_id"]: bool(r[key]) for r in v} for k, v in rows.items()}
    saved = any(r.get("c") or r.get("completions") or r.get("completion") for v in rows.values() for r in v)
    return outcome["before"], outcome["after"], saved


# ---------------------------------------------------------------- reply forms of a correct answer
def _split_prompt(task: Task) -> tuple[list[str], list[str], str]:
    """``(imports, helper definitions, entry function)`` of the canonical solution, as source text."""
    src = task.solution
    imports, helpers, entry = [], [], ""
    for node in ast.parse(src).body:
        text = ast.get_source_segment(src, node) or ""
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(text)
        elif isinstance(node, ast.FunctionDef) and node.name == task.entry_point:
            entry = text
        else:
            helpers.append(text)
    return imports, helpers, entry


def _body(task: Task) -> str:
    return task.solution[len(task.prompt):]


FORMS: dict[str, Callable[[Task], str]] = {
    # what the chat prompt asks for: the whole function (helpers kept) in one python block, imports left out
    "whole function in a fence": lambda t: FENCE.format("\n\n".join(_split_prompt(t)[1] + [_split_prompt(t)[2]])),
    "function with imports and a usage example, prints and a wrong assert":
        lambda t: FENCE.format("\n".join(_split_prompt(t)[0]) + "\n\n" + "\n\n".join(
            _split_prompt(t)[1] + [_split_prompt(t)[2]]) + f"\n\n# Example usage\nprint({t.entry_point})\n"
            f"assert False, 'my own test'\n"),
    "function in prose, no fence": lambda t: "Here is the completed function:\n\n" + "\n\n".join(
        _split_prompt(t)[1] + [_split_prompt(t)[2]]) + "\n\nIt returns the expected result for the examples.",
    "entry function only (helpers the prompt defined not restated)": lambda t: FENCE.format(_split_prompt(t)[2]),
    "only the body, continuing the prompt": lambda t: FENCE.format(_body(t).rstrip()),
}


def replay_forms(tasks: list[Task], workers: int = 2) -> dict[str, dict[str, bool]]:
    """For each form, which problems' correct answers pass through build_program (chat) and the sandbox."""
    out: dict[str, dict[str, bool]] = {}
    with Sandbox(timeout_s=10, workers=workers) as box:
        for name, form in FORMS.items():
            programs = [build_program(t, form(t), "chat") for t in tasks]
            results = box.run_many([(p or "pass\n", t.tests) for p, t in zip(programs, tasks)])
            out[name] = {t.task_id: bool(p) and r.passed for p, r, t in zip(programs, results, tasks)}
    return out


# ---------------------------------------------------------------- per-problem causes
def transition(before: bool, after: bool) -> str:
    return {(False, True): "fixed", (True, False): "broken", (False, False): "stayed failing",
            (True, True): "stayed passing"}[(before, after)]


def cause(tid: str, run: tuple[dict, dict], others: dict[str, tuple[dict, dict]],
          helper_dropped: set[str]) -> str | None:
    """The cause the saved results support for one problem, or ``None`` for one that stayed passing."""
    move = transition(run[0][tid], run[1][tid])
    if move == "stayed passing":
        return None
    if tid in helper_dropped and not run[1][tid]:
        return "format: needs the prompt's helper restated (extraction keeps only the reply and the prompt's imports)"
    same = [name for name, (b, a) in others.items() if transition(b[tid], a[tid]) == move]
    if move in ("fixed", "broken"):
        if same:
            return f"{move} here and in an arm that learned nothing for HumanEval (flip of greedy decoding)"
        return f"{move} only under GRPO"
    if any(a[tid] or b[tid] for b, a in others.values()):
        return "stayed failing under GRPO, passes in another arm, before or after its training (near the model's edge)"
    return "fails in every arm, before and after (beyond this model; logic vs format unknown: no completions)"


def analyse(run_path: Path, control_path: Path, other_paths: dict[str, Path], tasks: list[Task],
            forms: dict[str, dict[str, bool]]) -> dict[str, Any]:
    run_b, run_a, saved = read_outcomes(run_path)
    others = {"control": read_outcomes(control_path)[:2]}
    others.update({name: read_outcomes(p)[:2] for name, p in other_paths.items()})
    ids = [t.task_id for t in tasks]
    for name, (b, _) in [("run", (run_b, run_a)), *others.items()]:
        if set(b) != set(ids):
            raise Refused(f"{name}: its problems are not HumanEval's 164; give a HumanEval problems file")
    helper_dropped = {tid for tid in ids
                      if forms["whole function in a fence"][tid]
                      and not forms["entry function only (helpers the prompt defined not restated)"][tid]}
    entry = {t.task_id: t.entry_point for t in tasks}
    causes: dict[str, list[str]] = {}
    for tid in ids:
        c = cause(tid, (run_b, run_a), others, helper_dropped)
        if c is not None:
            causes.setdefault(c, []).append(tid)
    moves = Counter(transition(run_b[t], run_a[t]) for t in ids)
    return {"completions_saved": saved, "transitions": dict(moves),
            "forms": {name: sum(v.values()) for name, v in forms.items()}, "n": len(ids),
            "causes": {c: [f"{t} ({entry[t]})" for t in tids] for c, tids in
                       sorted(causes.items(), key=lambda kv: -len(kv[1]))}}


def report(res: dict[str, Any], examples: int = 4) -> str:
    n = res["n"]
    lines = [f"completions saved in the result files: {'yes' if res['completions_saved'] else 'no'} (pass/fail only)",
             "", f"GRPO on HumanEval, per problem: " + ", ".join(f"{k} {v}" for k, v in res["transitions"].items()),
             "", "| a correct answer replied as | passes build_program (chat) + sandbox |", "|---|---:|"]
    lines += [f"| {name} | {k} / {n} |" for name, k in res["forms"].items()]
    lines += ["", "| cause (what the saved results support) | problems | examples |", "|---|---:|---|"]
    lines += [f"| {c} | {len(tids)} | {', '.join(tids[:examples])} |" for c, tids in res["causes"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=RUN, help="the GRPO run's HumanEval problems file")
    ap.add_argument("--control", type=Path, default=CONTROL, help="its shuffled-reward control arm's")
    ap.add_argument("--other", action="append", default=None, metavar="NAME=FILE",
                    help="another arm that learned nothing for HumanEval (default: the three SCoRe arms)")
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args(argv)
    try:
        others = OTHERS if args.other is None else dict(_named(s) for s in args.other)
        tasks = load_humaneval()
        res = analyse(args.run, args.control, others, tasks, replay_forms(tasks))
    except Refused as exc:
        print(f"transfer_causes.py: {exc}", file=sys.stderr)
        return 2
    print(report(res))
    if args.json:
        from distlab.atomic import atomic_write_text

        atomic_write_text(args.json, json.dumps(res, indent=1) + "\n")
    return 0


def _named(spec: str) -> tuple[str, Path]:
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise Refused(f"--other '{spec}': give NAME=FILE (a distlab eval problems file)")
    return name, Path(path)


if __name__ == "__main__":
    sys.exit(main())
