"""The sandbox's settings, as a plain dataclass a recipe config can nest (``sandbox.timeout_s=...``)."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass
class SandboxConfig:
    timeout_s: float = 5.0  # wall clock per program; the CPU limit is a second or two above it
    memory_mb: int = 1024  # address space of each process (RLIMIT_AS)
    max_procs: int = 64  # processes of the program (fork bombs stop here); its uid may run one more, the judge
    max_file_mb: int = 16  # largest file a program may write, its captured output included
    max_open_files: int = 64
    workers: int = os.cpu_count() or 1  # programs run at once, each in its own worker slot and uid
    isolation: str = "auto"  # auto | namespaces | userns | rlimits; a named level that is unavailable is an error
    site_packages: bool = False  # let programs import installed packages (numpy...): slower start-up, .pth files run
    python: str = ""  # interpreter for programs; "" = this one if the sandbox uid can run it, else python3 in /usr
