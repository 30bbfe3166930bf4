"""``distlab sandbox run PROGRAM.py --tests TESTS.py``: check by hand what the reward would say about a program.

The exit status is 0 whatever the program did (the verdict is the output); it is non-zero only when this command
itself cannot work, such as a missing file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

from distlab.errors import DistlabError


def _read(path: str, what: str) -> str:
    p = Path(path)
    if p.is_dir():
        raise DistlabError(f"{what} {path} is a directory; give a Python file")
    if not p.is_file():
        raise DistlabError(f"{what} {path} not found")
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DistlabError(f"cannot read {what} {path}: {exc}") from None


def cmd_run(a: argparse.Namespace) -> int:
    from distlab.sandbox import Sandbox, SandboxConfig

    from distlab.sandbox.sandbox import judging_problem

    program, tests = _read(a.program, "program"), _read(a.tests, "tests")
    why = judging_problem(tests)
    if why is not None:
        raise DistlabError(f"{a.tests}: {why}; give a tests file with at least one assert")
    cfg = SandboxConfig(timeout_s=a.timeout, memory_mb=a.memory_mb, workers=1, isolation=a.isolation)
    with Sandbox(cfg) as box:
        r = box.run(program, tests)
    if a.json:
        print(json.dumps({"passed": r.passed, "status": r.status, "seconds": r.seconds}))
    else:
        last = next((ln for ln in reversed(r.stderr_tail.splitlines()) if ln.strip()), "")
        where = f"{box.isolation.level}, {box.isolation.view}"
        print(f"{r.status} in {r.seconds:.2f}s ({where})" + (f": {last}" if last and not r.passed else ""))
    return 0


def add_command(subparsers) -> None:
    """Register ``sandbox run`` on the top-level ``distlab`` subparsers."""
    p = subparsers.add_parser("sandbox", help="run a program and its tests in the execution sandbox")
    sub = p.add_subparsers(dest="sandbox_command", metavar="COMMAND")
    r = sub.add_parser("run", help="run PROGRAM.py, then TESTS.py in its namespace; print the verdict")
    r.add_argument("program", metavar="PROGRAM.py")
    r.add_argument("--tests", required=True, metavar="TESTS.py", help="asserts run after the program")
    r.add_argument("--timeout", type=float, default=5.0, help="wall-clock seconds (default 5)")
    r.add_argument("--memory-mb", type=int, default=1024, help="address-space limit (default 1024)")
    r.add_argument("--isolation", default="auto", help="auto, namespaces, userns or rlimits (default auto)")
    r.add_argument("--json", action="store_true", help='print {"passed", "status", "seconds"} as JSON')
    r.set_defaults(func=cmd_run)
    p.set_defaults(func=lambda a: p.print_help() or 0)


# What the ``distlab.commands`` entry point ``sandbox`` loads: the command's own registration, so ``distlab sandbox``
# imports neither torch nor any recipe.
COMMANDS = SimpleNamespace(register_commands=lambda top, data_subparsers: add_command(top))


def main(argv: list[str] | None = None) -> int:
    """``python -m distlab.sandbox.cli run ...``, with the ``distlab`` command's error handling."""
    parser = argparse.ArgumentParser(prog="distlab")
    add_command(parser.add_subparsers(dest="command", metavar="COMMAND"))
    a = parser.parse_args(["sandbox", *(sys.argv[1:] if argv is None else argv)])
    try:
        return a.func(a)
    except DistlabError as exc:
        print(f"distlab: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
