"""The sandbox's settings, as a plain dataclass a recipe config can nest (``sandbox.timeout_s=...``)."""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass

from distlab.errors import DistlabError


@dataclass
class SandboxConfig:
    timeout_s: float = 5.0  # wall clock per program; the CPU limit is a second or two above it
    memory_mb: int = 1024  # address space of each process (RLIMIT_AS)
    max_procs: int = 64  # processes of the program (fork bombs stop here); its uid may run one more, the judge
    max_file_mb: int = 16  # largest file a program may write, its captured output included
    max_open_files: int = 64
    workers: int = 0  # programs run at once, each in its own worker slot and uid; 0 = the node's cores shared by its ranks
    isolation: str = "auto"  # auto | namespaces | userns | rlimits; a named level that is unavailable is an error
    site_packages: bool = False  # let programs import installed packages (numpy...): slower start-up, .pth files run
    python: str = ""  # interpreter for programs; "" = this one if the sandbox uid can run it, else python3 in /usr


# key: (smallest value, largest value or None)
LIMITS = {"timeout_s": (0.001, 3600.0), "memory_mb": (32, None), "max_procs": (1, None), "max_file_mb": (1, None),
          "max_open_files": (8, None), "workers": (0, 256)}


def per_rank(cfg: SandboxConfig, ranks_on_node: int = 1) -> SandboxConfig:
    """``cfg`` with ``workers=0`` made a number: the node's cores divided among the ranks that share them.

    Every rank of a multi-GPU job scores its own completions with its own pool; a pool as large as the node each
    would run ranks x cores programs at once, and a program's wall-clock limit would then measure the crowd.
    """
    if cfg.workers:
        return cfg
    return dataclasses.replace(cfg, workers=max(1, (os.cpu_count() or 1) // max(1, ranks_on_node)))


def check_limits(cfg: SandboxConfig) -> None:
    """Numbers the process limits are made of: finite, in range, each named on its own."""
    for key, (low, high) in LIMITS.items():
        value = getattr(cfg, key)
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= low
                and (high is None or value <= high)):
            span = f"between {low:g} and {high:g}" if high is not None else f"{low:g} or more"
            raise DistlabError(f"sandbox.{key}={value} must be {span}")
    if cfg.python and not (os.path.isfile(cfg.python) and os.access(cfg.python, os.X_OK)):
        raise DistlabError(f"sandbox.python={cfg.python} is not an executable file; give a python3 interpreter's path "
                           f"or leave it empty (this interpreter, or python3 in /usr)")


def check_sandbox(cfg: SandboxConfig) -> None:
    """Everything a Sandbox would refuse at start, refused before any process starts (the level is probed once)."""
    from distlab.sandbox.isolation import detect

    check_limits(cfg)
    detect(cfg.isolation, cfg.python)
