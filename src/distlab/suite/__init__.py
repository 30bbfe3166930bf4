"""Experiment suites: YAML specs of experiments x seeds, statistics and reports, SLURM script generation.

Names are imported on first use: every ``distlab`` command registers the suite CLI, and loading
scipy and matplotlib for it would slow down each training process's start.
"""

import importlib

_EXPORTS = {"build_report": "report", "report_metrics": "report", "is_finished": "runs", "load_suite_runs": "runs",
            "run_suite": "runner", "write_slurm_scripts": "slurm", "RunSpec": "spec", "Suite": "spec",
            "load_suite": "spec", "shipped_suites": "spec"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"distlab.suite.{_EXPORTS[name]}"), name)
    raise AttributeError(name)
