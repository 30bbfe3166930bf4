"""Shared fixtures for suite tests: the real local SLURM cluster lives in tests/slurm_cluster.py."""

from slurm_cluster import slurm  # noqa: F401  (session fixture, re-exported for this folder)
