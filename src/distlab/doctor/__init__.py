"""``distlab doctor``: check that this machine can train, and say exactly what to change if not.

Exit codes (stable, for scripts and CI):
  0  no errors: training will run. Warnings (slower or noisier than it could be) and notes are printed
     but do not fail the command, so a healthy CPU machine, which always earns a few warnings, passes
  3  at least one error: training will fail or give wrong results (2 stays the CLI's bad-input code)
Scripts that want to treat warnings as failures read ``findings`` from ``--json``.

``--json`` prints one object with the keys in :data:`REPORT_KEYS`; the rich view renders the same
object, so the two never disagree.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_WARN", "ModelSpec", "REPORT_KEYS", "collect_report", "recipe_model_spec",
           "register", "run_doctor", "run_from_args"]

# The heavy part (torch, the checks) lives in distlab.doctor.report and loads on first use, so that
# registering the command for `distlab --help` costs nothing.
_LAZY = {"ModelSpec": "distlab.recipe", **{name: "distlab.doctor.report" for name in (
    "EXIT_ERROR", "EXIT_OK", "EXIT_WARN", "REPORT_KEYS", "collect_report", "recipe_model_spec", "run_doctor")}}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'distlab.doctor' has no attribute {name!r}")


def run_from_args(args: argparse.Namespace, extra: list[str] | None = None, model: Any = None) -> int:
    """Entry point for the parsed ``doctor`` subcommand (see :func:`distlab.doctor.report.run_from_args`)."""
    from distlab.doctor.report import run_from_args as run

    return run(args, extra, model)


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``doctor`` to the CLI's subparsers; ``args.func`` is :func:`run_from_args`."""
    p = subparsers.add_parser(
        "doctor", help="check GPUs, NCCL/gloo, environment and memory before training",
        description="Check this machine for distributed training. Exit code: 0 no errors (warnings are only "
                    "printed), 3 errors.")
    p.add_argument("--json", dest="json_out", action="store_true", help="print one JSON object")
    p.add_argument("--no-bandwidth", dest="bandwidth", action="store_false", help="skip the all-reduce test")
    p.add_argument("--bandwidth-mb", type=int, default=64, metavar="N",
                   help="largest all-reduce message in MiB (sizes 1, 16, 64 up to N; default 64)")
    p.add_argument("--procs", type=int, default=None, metavar="N",
                   help="CPU processes the training will use, as in `distlab train --procs N` (default: 1 with "
                        "--recipe, as train uses; 2 otherwise); the bandwidth test uses at least 2")
    p.add_argument("--scaling-file", type=Path, default=None, metavar="PATH",
                   help="a `distlab bench scaling` result (default: newest distributed_results/*.json)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="seconds before the GPU probe or bandwidth test is declared hung (default 60)")
    p.add_argument("--recipe", help="estimate memory for this recipe's config (add key=value overrides)")
    p.add_argument("--config", action="append", default=[], help="preset for --recipe")
    p.set_defaults(func=run_from_args)
    return p
