"""Experiment suites: YAML specs of experiments x seeds, statistics and reports, SLURM script generation."""

from distlab.suite.report import build_report
from distlab.suite.runs import is_finished, load_suite_runs
from distlab.suite.slurm import write_slurm_scripts
from distlab.suite.spec import RunSpec, Suite, load_suite, shipped_suites

__all__ = ["RunSpec", "Suite", "build_report", "is_finished", "load_suite", "load_suite_runs", "shipped_suites",
           "write_slurm_scripts"]
