"""``distlab data tasks``: a built-in task set written as JSONL, to read, edit and train on (``task.train=FILE``).

The built-in sets are adapters that yield rows of the one task schema (:mod:`.builtin`); this writes those rows,
so the file loads back as the same tasks, and an edited file trains without code changes.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace


def register(data_subparsers) -> None:
    p = data_subparsers.add_parser("tasks", help="write a built-in LM task set (mbpp, humaneval, synthetic, math) "
                                                  "as JSONL rows to edit and train on")
    p.add_argument("source", help="mbpp | mbpp:docstring (MBPP asked as HumanEval asks) | humaneval | synthetic | math")
    p.add_argument("--split", default=None, help="mbpp: train, validation, test, sanitized-*, sanitized (all 427); "
                                                 "humaneval: test; synthetic/math: train or eval (default: train; "
                                                 "humaneval: test)")
    p.add_argument("-o", "--output", required=True, metavar="FILE.jsonl")
    p.add_argument("--n", type=int, default=None, help="synthetic/math: tasks to draw (required for them)")
    p.add_argument("--seed", type=int, default=0, help="synthetic/math: the draw's seed")
    p.add_argument("--families", default=None, help="synthetic/math: comma-separated families (default: the split's)")
    p.add_argument("--mbpp-dir", default="../shared/data/mbpp", help="MBPP's files (default ../shared/data/mbpp)")
    p.add_argument("--include-challenge", action="store_true", help="mbpp: also the challenge tests")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    p.set_defaults(func=_write)


# What the ``distlab.commands`` entry point ``data.tasks`` loads: a light stand-in for a recipe (only its
# ``register_commands``), so ``distlab data --help`` does not import torch through the GRPO recipe.
COMMANDS = SimpleNamespace(register_commands=lambda top, data_subparsers: register(data_subparsers))


MAX_TASKS = 200_000  # drawn in one process, held in memory and written at once: 10^5 took 14 s on a loaded 2-core CPU


def _write(args: argparse.Namespace) -> int:
    from distlab.errors import DistlabError
    from distlab.recipes.lm.tasks.builtin import SOURCES, builtin_rows
    from distlab.recipes.lm.tasks.jsonl import write_jsonl

    out = Path(args.output)
    if args.source not in SOURCES:
        raise DistlabError(f"unknown task set {args.source!r}; choose one of {', '.join(SOURCES)}")
    if out.exists() and not args.force:
        raise DistlabError(f"{out} exists; choose another --output or add --force to replace it")
    if not out.parent.is_dir():
        raise DistlabError(f"--output {out}: folder {out.parent} does not exist")
    if args.source in ("synthetic", "math") and args.n is None:
        raise DistlabError(f"{args.source} tasks are drawn, not read: give their number with --n")
    if args.n is not None and not 1 <= args.n <= MAX_TASKS:
        raise DistlabError(f"--n {args.n} is invalid; it must be between 1 and {MAX_TASKS:,} (drawing is in memory and "
                           f"silent; write several files with different --seed for more)")
    split = args.split or ("test" if args.source == "humaneval" else "train")
    families = [f.strip() for f in args.families.split(",") if f.strip()] if args.families else None
    rows = builtin_rows(args.source, split, mbpp_dir=args.mbpp_dir, n=args.n, seed=args.seed, families=families,
                        include_challenge=args.include_challenge)
    write_jsonl(rows, out)
    print(f"wrote {len(rows)} {args.source} {split} tasks to {out} (train on it: task.train={out})")
    return 0
