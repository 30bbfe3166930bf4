"""``distlab suite run|slurm|report``: run every experiment x seed of a suite, on this machine or on SLURM.

This module parses the arguments and prints; the scheduler behind ``suite run`` is
:mod:`distlab.suite.runner`, the report :mod:`distlab.suite.report`, the scripts :mod:`distlab.suite.slurm`.
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from distlab.errors import DistlabError, near_matches

if TYPE_CHECKING:
    from distlab.suite.spec import Suite

# world-size scaling every suite run asks for unless its YAML says otherwise: the suites' batch and lr are
# tuned for one device, so N devices run a global batch N times larger with lr * sqrt(N)
SCALE_DEFAULTS = {"scale.batch": "linear", "scale.lr": "sqrt"}
RUN_FLAGS = ["--seeds", "--gpus", "--procs", "--parallel", "--smoke", "--scale", "--dry-run", "--root", "--logs",
             "--no-report", "--create-slurm", "--test", "--force", "--only"]
SLURM_FLAGS = ["--out", "--gpus-per-node", "--nodes", "--cpus-per-task", "--mem", "--cpus-per-gpu", "--mem-per-gpu",
               "--setup", "--time", "--partition", "--account", "--python", "--signal-s"]
# defaults of the SLURM options; 'suite run' parses them as None so that one given without --create-slurm is seen
SLURM_DEFAULTS = {"out": "slurm_scripts", "gpus_per_node": 1, "nodes": 1, "time": "24:00:00", "python": "python",
                  "signal_s": 120}


# ----------------------------------------------------------------------------------------------- parser

def register(subparsers) -> None:
    """Add ``distlab suite`` with its run / slurm / report subcommands."""
    suite = subparsers.add_parser("suite", help="run experiment suites (experiments x seeds), on SLURM too, "
                                                "and report them with confidence intervals")
    sub = suite.add_subparsers(dest="suite_command", metavar="SUBCOMMAND")
    run = sub.add_parser("run", help="run every experiment x seed here (resumable), then write the report")
    _add_target(run)
    _add_common(run)
    run.add_argument("--gpus", type=int, help="GPUs for the whole suite (-1 = all visible; default: all "
                                             "visible, else CPU)")
    run.add_argument("--procs", type=int, help="CPU processes (gloo) per run instead of GPUs")
    run.add_argument("--parallel", type=int, default=1, help="runs at once; each gets its own GPUs/P slice "
                                                               "(more runs than GPUs: they share the GPUs evenly)")
    run.add_argument("--dry-run", action="store_true", help="print the plan (commands) and start nothing")
    run.add_argument("--logs", default="logs", help="folder for <suite>/<exp>-seed<k>.log (default logs)")
    run.add_argument("--no-report", action="store_true", help="do not build the report at the end")
    run.add_argument("--test", choices=("welch", "paired", "exact"), default="welch",
                     help="significance test of the final report")
    run.add_argument("--create-slurm", action="store_true", help="write SLURM scripts instead of running "
                                                                 "(same as 'distlab suite slurm')")
    _add_slurm_options(run.add_argument_group("with --create-slurm"), unset=True)
    run.set_defaults(func=cmd_run)
    slurm = sub.add_parser("slurm", help="write one sbatch job array per experiment and submit_all.sh")
    _add_target(slurm)
    _add_common(slurm)
    slurm.add_argument("--procs", type=int, help="training processes per node (default: one per GPU, 1 on CPU)")
    _add_slurm_options(slurm)
    slurm.set_defaults(func=cmd_slurm)
    rep = sub.add_parser("report", help="(re)build the report of a suite's results folder")
    rep.add_argument("target", help="suite name, suite YAML file or results folder")
    rep.add_argument("--root", default="experiment_results", help="results root (default experiment_results)")
    rep.add_argument("--test", choices=("welch", "paired", "exact"), default="welch")
    rep.set_defaults(func=cmd_report)
    lst = sub.add_parser("list", help="the shipped suites (recipe, experiments, what each asks), or one suite's "
                                      "experiments and their settings")
    lst.add_argument("target", nargs="?", help="a suite name or YAML file: list its experiments")
    lst.set_defaults(func=cmd_list)
    suite.set_defaults(func=lambda a: _usage(suite))


def _add_target(p: argparse.ArgumentParser) -> None:
    p.add_argument("suite", help="shipped suite name or path to a suite YAML; trailing key=value words "
                                 "override every run")


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seeds", type=_seeds_arg, default=3, help="seed count K (0..K-1) or a list like 0,3,7")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--scale", metavar="NAME", help="run at a named size from the suite's scales blocks "
                                                     "(e.g. h200: one 10-minute command on one H200)")
    size.add_argument("--smoke", action="store_const", dest="scale", const="smoke",
                      help="tiny settings from the suite's smoke blocks (CPU); same as --scale smoke")
    p.add_argument("--root", default="experiment_results", help="results root (default experiment_results)")
    p.add_argument("--only", type=_names_arg, metavar="EXP[,EXP...]", help="only these experiments (names as "
                   "'distlab suite list SUITE' prints them); the report compares with the baseline where its "
                   "results exist")
    p.add_argument("--force", action="store_true", help="start every run even where the doctor's memory estimate "
                   "says it cannot fit (passed to each 'distlab train')")


def _add_slurm_options(p, unset: bool = False) -> None:
    """The sbatch options; ``unset`` leaves every default None (filled in by :func:`_slurm_defaults`)."""
    from distlab.launch.slurm import add_node_options

    d = {k: None for k in SLURM_DEFAULTS} if unset else SLURM_DEFAULTS
    p.add_argument("--out", default=d["out"], help="folder for the scripts (default slurm_scripts)")
    p.add_argument("--gpus-per-node", type=int, default=d["gpus_per_node"],
                   help="GPUs per node, each run launched with --gpus N (default 1); 0 for a CPU cluster (--procs)")
    p.add_argument("--nodes", type=int, default=d["nodes"], help="nodes per run; each runs one launcher, started "
                                                                 "by srun")
    add_node_options(p)
    p.add_argument("--time", default=d["time"], help="time limit per job (requeued jobs resume; default 24:00:00)")
    p.add_argument("--partition")
    p.add_argument("--account")
    p.add_argument("--python", default=d["python"], help="interpreter the jobs run (default: python on PATH, "
                                                         "after --setup)")
    p.add_argument("--signal-s", type=int, default=d["signal_s"],
                   help="seconds before the limit SLURM warns the job (default 120)")


def _slurm_given(a: argparse.Namespace) -> list[str]:
    """The SLURM options on a ``suite run`` command line (all parsed as None there unless given)."""
    return [flag for flag in SLURM_FLAGS if getattr(a, flag[2:].replace("-", "_"), None) is not None]


def _slurm_defaults(a: argparse.Namespace) -> argparse.Namespace:
    """``suite run --create-slurm``: the SLURM options not given take ``suite slurm``'s defaults."""
    for key, value in SLURM_DEFAULTS.items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    return a


def _names_arg(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise DistlabError(f"--only {text!r} has an empty name; give experiment names like base,no_act")
    return names


def _seeds_arg(text: str) -> int | list[int]:
    """A seed count K (seeds 0..K-1) or a list; an empty item or a negative seed is a typo, never skipped."""
    fix = "give a count like 3 or a list of seeds 0 or more like 0,3,7"
    try:
        seeds = [int(s) for s in text.split(",")] if "," in text else int(text)
    except ValueError:
        raise DistlabError(f"--seeds {text!r}: {fix}") from None
    if any(s < 0 for s in (seeds if isinstance(seeds, list) else [seeds])):
        raise DistlabError(f"--seeds {text!r} has a negative number; {fix}")
    if isinstance(seeds, list) and len(set(seeds)) != len(seeds):
        raise DistlabError(f"--seeds {text!r} repeats a seed (seeds must be distinct); {fix}")
    return seeds


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _extra_overrides(extra: Sequence[str], flags: Sequence[str]) -> dict[str, str]:
    """Words after the suite name: ``key=value`` overrides for every run; anything else is a typo."""
    out: dict[str, str] = {}
    for tok in extra:
        if tok.startswith("-"):
            hint = near_matches(tok.split("=")[0], flags)
            raise DistlabError(f"unknown option {tok}" + (f"; did you mean {', '.join(hint)}?" if hint else ""))
        if "=" not in tok or tok.startswith("="):
            raise DistlabError(f"unexpected argument {tok!r}; overrides look like key=value, e.g. lr=1e-4")
        key, value = tok.split("=", 1)
        out[key] = value
    return out


def _load(target: str, extra: Sequence[str], flags: Sequence[str], only: Sequence[str] | None = None) -> Suite:
    from distlab.suite.spec import load_suite

    suite = load_suite(target).layered(SCALE_DEFAULTS, _extra_overrides(extra, flags))
    return suite.only(only) if only else suite


def _check_runs(suite: Suite, seeds, scale: str | None, root: str) -> None:
    """Every experiment's keys and types checked against the recipe's schema, before anything starts or is
    written: a key the recipe does not have (``foo=1`` after the suite name) is refused here, not in every run's
    log. Values are left to each run, so one experiment that fails is reported while the others go on."""
    from distlab.config import check_values, compose, to_object
    from distlab.recipe import load_recipe

    if Path(root).exists() and not Path(root).is_dir():
        raise DistlabError(f"--root {root} is a file, not a folder; give a folder for the results (it is created)")
    recipe, seen, value_errors = load_recipe(suite.recipe), set(), []
    for spec in suite.runs(seeds, scale=scale, root=root):
        if spec.experiment in seen:
            continue
        seen.add(spec.experiment)
        try:
            cfg = compose(recipe.config, [], spec.overrides, getattr(recipe, "aliases", None))
        except DistlabError as exc:
            raise DistlabError(f"suite {suite.name}, experiment {spec.experiment}: {exc}") from None
        try:
            check_values(recipe, to_object(cfg))
        except DistlabError as exc:
            value_errors.append(f"suite {suite.name}, experiment {spec.experiment}: {exc}")
    if value_errors and len(value_errors) == len(seen):  # e.g. steps=-1 after the suite name: no run could start
        raise DistlabError(value_errors[0])


# ----------------------------------------------------------------------------------------------- slurm

def cmd_slurm(a: argparse.Namespace, extra: list[str]) -> int:
    """Write the suite's sbatch scripts and say how to submit them."""
    from distlab.launch.slurm import per_gpu
    from distlab.suite.slurm import scale_line, write_slurm_scripts

    suite = _load(a.suite, extra, ["--procs", *SLURM_FLAGS, "--seeds", "--smoke", "--scale", "--root", "--force",
                                   "--only"], a.only)
    _check_runs(suite, a.seeds, a.scale, a.root)
    bundle = write_slurm_scripts(suite, a.out, gpus_per_node=a.gpus_per_node, nodes=a.nodes,
                                 cpus_per_task=a.cpus_per_task, mem=a.mem, time=a.time, seeds=a.seeds,
                                 partition=a.partition, account=a.account, scale=a.scale, python=a.python,
                                 signal_s=a.signal_s, procs_per_node=a.procs, results_root=a.root, force=a.force,
                                 **per_gpu(a))
    runs = len(suite.runs(a.seeds, scale=a.scale, root=a.root))
    print(f"wrote {len(bundle.scripts)} job arrays ({runs} runs) for suite {suite.name} to {Path(a.out)}")
    print(f"  {scale_line(suite, a.scale)}")
    print(f"submit from the project root (results go to {a.root}/{suite.name}/):")
    print(f"  bash {shlex.quote(_relative(bundle.submit_all))}")
    print(f"then: distlab suite report {suite.name} --root {a.root}")
    return 0


def _relative(path: Path) -> str:
    """Shorter to read and to paste when the path lies under the current directory."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# ----------------------------------------------------------------------------------------------- list

def cmd_list(a: argparse.Namespace) -> int:
    """The shipped suites, or one suite's experiments with the settings each changes from the recipe's."""
    from distlab.suite.spec import load_suite, shipped_suites

    if a.target is None:
        print("shipped suites (distlab suite list NAME shows one's experiments):")
        for name in shipped_suites():
            suite = load_suite(name)
            about = re.split(r"(?<=[.?])\s", " ".join(suite.description.split()), maxsplit=1)[0]  # first sentence
            print(f"  {name:<20} {suite.recipe:<6} {len(suite.experiments):>3} experiments  {about}")
        return 0
    suite = load_suite(a.target)
    print(f"suite {suite.name} (recipe {suite.recipe}, baseline {suite.baseline}, scales: "
          f"{', '.join(suite.scales) or 'none'}):")
    for name, exp in suite.experiments.items():
        settings = " ".join(f"{k}={v}" for k, v in exp.overrides.items()) or "(the recipe's defaults)"
        print(f"  {name + (' *' if name == suite.baseline else ''):<24} {settings}")
    return 0


# ----------------------------------------------------------------------------------------------- report

def cmd_report(a: argparse.Namespace) -> int:
    """Rebuild the report and print where it is with a short table."""
    _build_and_print(_suite_dir(a.target, a.root), a.test, sys.stdout)
    return 0


def _suite_dir(target: str, root: str) -> Path:
    """A results folder as given, else ``<root>/<suite name>`` of a suite name or file."""
    if Path(target).is_dir():
        return Path(target)
    from distlab.suite.spec import load_suite

    return Path(root) / load_suite(target).name


def _build_and_print(suite_dir: Path, test: str, out: TextIO) -> Path:
    import json

    from distlab.suite.report import build_report, fmt_metric, metric_header

    path = build_report(suite_dir, test=test)
    data = json.loads((path.parent / "report.json").read_text())
    base = data.get("baseline")
    print(f"report: {path} (also report.html, report.json)", file=out)
    shown = data["report_metrics"]  # the recipe's headline metrics that some run logged, primary first
    percent = set(shown["percent"])
    names = [m for m in shown["names"] if any(m in res["metrics"] for res in data["experiments"].values())]
    rows = [["experiment", "seeds", *[metric_header(m, m in percent) for m in names]]]
    for name, res in data["experiments"].items():
        metrics = res["metrics"]
        rows.append([name + (" *" if name == base else ""), str(len(res["seeds"])),
                     *[fmt_metric(_finite(metrics.get(m)), m in percent) for m in names]])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)), file=out)
    if base:
        print("  (* baseline; mean ± 95% CI half-width over seeds)", file=out)
    return path


def _finite(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    """report.json writes nan as null; fmt_ci wants floats."""
    if summary is None:
        return None
    return {k: (math.nan if v is None else v) for k, v in summary.items()}


# ----------------------------------------------------------------------------------------------- run

def cmd_run(a: argparse.Namespace, extra: list[str]) -> int:
    """Run (or print, or write SLURM scripts for) every experiment x seed."""
    if a.create_slurm:
        if a.gpus is not None:
            raise DistlabError(f"--gpus {a.gpus} is for runs on this machine; with --create-slurm give "
                               f"--gpus-per-node {a.gpus} (GPUs of each cluster node)")
        return cmd_slurm(_slurm_defaults(a), extra)
    given = _slurm_given(a)
    if given:
        raise DistlabError(f"{', '.join(given)} only apply to SLURM scripts; add --create-slurm (or use 'distlab "
                           f"suite slurm'), or drop {'them' if len(given) > 1 else 'it'} to run here")
    from distlab.suite.runner import device_slots, plan, print_plan, run_suite, visible_gpus

    suite = _load(a.suite, extra, [*RUN_FLAGS, *SLURM_FLAGS], a.only)
    _check_runs(suite, a.seeds, a.scale, a.root)
    slots = device_slots(a.gpus, a.procs, a.parallel, visible_gpus() if a.procs is None else [])
    jobs = plan(suite, a.seeds, a.scale, Path(a.root), Path(a.logs), slots, force=a.force)
    if a.dry_run:
        print_plan(suite, jobs, slots, sys.stdout)
        return 0
    suite_dir = Path(a.root) / suite.name
    outcome = run_suite(suite, jobs, slots, Path(a.root), a.procs, a.scale)
    print(f"suite {suite.name}: {len(outcome.done)} ran, {len(outcome.skipped)} already finished, "
          f"{len(outcome.failed)} failed")
    for label, rc, log in outcome.failed:
        print(f"  FAILED {label} (exit {rc}); log: {log}")
    if not a.no_report:
        try:
            _build_and_print(suite_dir, a.test, sys.stdout)
        except DistlabError as exc:
            print(f"no report: {exc}")
    return 1 if outcome.failed else 0
