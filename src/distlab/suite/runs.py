"""Read finished run folders of a suite (``<suite_dir>/<experiment>/seed<k>/``) into plain data.

Kept apart from the report so the scheduler (:mod:`distlab.suite.runner`, which skips finished runs on
resume) and other tools ask "which runs are done" the same way the report does.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distlab.errors import DistlabError
from distlab.launch.bench import steady_median

_SEED_RE = re.compile(r"^seed(\d+)$")
ALIASES = {"accuracy": "token_accuracy"}


@dataclass
class RunData:
    """One finished run: final metrics, its eval curve (each row: step, time_s, metrics...) and its recipe."""

    experiment: str
    seed: int
    path: Path
    summary: dict[str, Any]
    evals: list[dict[str, float]] = field(default_factory=list)
    recipe: str | None = None  # from manifest.json; picks the metrics a report shows
    examples_per_s: float = math.nan  # median training throughput after the first third (compilation left out)

    def final(self, metric: str) -> float:
        """Final value from summary.json (top level or its ``eval`` section), else the last eval line; nan when
        the run never logged it."""
        for source in (self.summary, self.summary.get("eval")):
            if isinstance(source, dict) and metric in source and _is_number(source[metric]):
                return float(source[metric])
        for row in reversed(self.evals):
            if metric in row and _is_number(row[metric]):
                return float(row[metric])
        return math.nan


@dataclass
class SuiteRuns:
    """Finished runs by experiment and seed, plus run folders that have not finished (for the report)."""

    finished: dict[str, dict[int, RunData]]
    unfinished: list[Path]


def is_finished(run_dir: str | os.PathLike) -> bool:
    """Finished = ``summary.json`` exists and does not say the run stopped early.

    The trainer also writes a summary when it checkpoints and stops on SIGUSR1 (``"status": "preempted"``);
    such a run resumes later and must not be reported as final.
    """
    path = Path(run_dir) / "summary.json"
    if not path.is_file():
        return False
    try:
        status = json.loads(path.read_text()).get("status", "completed")
    except (json.JSONDecodeError, AttributeError):
        return True  # let read_run report the broken file instead of silently skipping the run
    return status == "completed"


def load_suite_runs(suite_dir: str | os.PathLike) -> SuiteRuns:
    """Every ``<exp>/seed<k>/`` under ``suite_dir``; malformed files raise a DistlabError naming the file."""
    root = Path(suite_dir)
    if not root.is_dir():
        raise DistlabError(f"results folder {root} does not exist; run the suite first "
                           f"(distlab suite run <suite>) or pass the folder it wrote")
    finished: dict[str, dict[int, RunData]] = {}
    unfinished: list[Path] = []
    for exp_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for run_dir in sorted(p for p in exp_dir.iterdir() if p.is_dir() and _SEED_RE.match(p.name)):
            seed = int(_SEED_RE.match(run_dir.name).group(1))
            if not is_finished(run_dir):
                unfinished.append(run_dir)
                continue
            finished.setdefault(exp_dir.name, {})[seed] = read_run(run_dir, exp_dir.name, seed)
    return SuiteRuns(finished, unfinished)


def read_run(run_dir: Path, experiment: str, seed: int) -> RunData:
    """Parse summary.json, the eval lines of metrics.jsonl and the training throughput its train lines log."""
    summary = _normalize(_read_json(run_dir / "summary.json"))
    if isinstance(summary.get("eval"), dict):
        summary["eval"] = _normalize(summary["eval"])
    evals, rates = [], []
    metrics_path = run_dir / "metrics.jsonl"
    if metrics_path.is_file():
        lines = metrics_path.read_text().splitlines()
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                if lineno == len(lines):
                    continue  # a run killed mid-write leaves a torn last line; everything before it is good
                raise DistlabError(f"{metrics_path}:{lineno} is not valid JSON; fix or delete that line") from None
            # eval_start: the starting model scored on the same problems (LM recipes), the curve's first point
            if row.get("split") in ("eval", "eval_start") and "step" in row:
                evals.append(_normalize(row))
            elif row.get("split") == "train" and _is_number(row.get("examples_per_s")):
                rates.append(float(row["examples_per_s"]))
    evals.sort(key=lambda r: r["step"])
    steady = steady_median(rates, warmup_frac=1 / 3) if rates else math.nan  # once compiled and warm
    return RunData(experiment, seed, run_dir, summary, evals, _recipe_of(run_dir), steady)


def _recipe_of(run_dir: Path) -> str | None:
    """The recipe ``manifest.json`` names (every ``distlab train`` run writes one); None if unreadable."""
    try:
        recipe = json.loads((run_dir / "manifest.json").read_text()).get("recipe")
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    return recipe if isinstance(recipe, str) and recipe else None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise DistlabError(f"{path} is not valid JSON ({exc.msg}); re-run that seed or delete the file") from None
    if not isinstance(data, dict):
        raise DistlabError(f"{path} must hold a JSON object of final metrics")
    return data


def _normalize(row: dict[str, Any]) -> dict[str, Any]:
    """Map metric aliases (``accuracy`` is token accuracy) to their canonical names."""
    out = dict(row)
    for alias, canonical in ALIASES.items():
        if alias in out and canonical not in out:
            out[canonical] = out[alias]
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
