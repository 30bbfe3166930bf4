"""Pytest fixture ``slurm``: a real single-node SLURM cluster (munged + slurmctld + slurmd) for this session.

Import it from a conftest (``from slurm_cluster import slurm``). It needs root and an installed SLURM
(``slurm-wlm`` and ``munge``); the tests never install anything: ``.ci/run`` does, or
``scripts/slurm_local.sh install DIR``. Without them the tests using it are skipped with the reason shown
(``pytest -rs``), unless ``DISTLAB_REQUIRE_SLURM=1`` (set by CI), which turns the skip into a failure so CI
cannot silently lose them. The daemons run from a temporary folder, write nothing outside it and are stopped
at the end of the session. Start-up takes about a second.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "slurm_local.sh"
_FIELD_RE = re.compile(r"(\w[\w/:]*)=(\S*)")
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
                "DEADLINE", "PREEMPTED"}


@dataclass
class SlurmCluster:
    """Handle on the running cluster; every client call carries ``SLURM_CONF`` for it."""

    dir: Path
    conf: Path
    startup_s: float

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def cmd(self, *args: str, check: bool = True, cwd: Path | None = None) -> str:
        res = subprocess.run(list(args), env=self.env, cwd=cwd, capture_output=True, text=True, timeout=60)
        if check and res.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({res.returncode}): {res.stderr.strip()}")
        return res.stdout

    def sbatch(self, script: Path, cwd: Path) -> str:
        """Submit and return the job id (for an array: the array's job id)."""
        return self.cmd("sbatch", "--parsable", str(script), cwd=cwd).strip().split(";")[0]

    def jobs(self, job_id: str) -> list[dict[str, str]]:
        """``scontrol show job`` as dicts, one per array task (no slurmdbd here, so no sacct)."""
        out = self.cmd("scontrol", "-o", "show", "job", job_id, check=False)
        return [dict(_FIELD_RE.findall(line)) for line in out.splitlines() if line.strip()]

    def wait(self, job_id: str, predicate, timeout: float = 60.0, poll: float = 0.3) -> list[dict[str, str]]:
        """Poll until ``predicate(jobs)`` holds; on timeout fail with the last job records."""
        deadline = time.monotonic() + timeout
        jobs: list[dict[str, str]] = []
        while time.monotonic() < deadline:
            jobs = self.jobs(job_id)
            if jobs and predicate(jobs):
                return jobs
            time.sleep(poll)
        raise AssertionError(f"job {job_id} did not reach the expected state in {timeout}s: "
                             f"{[(j.get('JobId'), j.get('JobState'), j.get('Reason')) for j in jobs]}")

    def wait_final(self, job_id: str, timeout: float = 60.0) -> list[dict[str, str]]:
        return self.wait(job_id, lambda js: all(j.get("JobState") in FINAL_STATES for j in js), timeout)

    def release(self, job_id: str) -> None:
        """slurmctld holds a requeued job for ~2 minutes (BeginTime); tests shorten that to 2 s.

        Not to 0: slurmd revokes the killed run's credential, and a restart within the same second carries a
        credential that looks revoked too ("Job credential revoked"), failing the job.
        """
        self.cmd("scontrol", "update", f"JobId={job_id}", "StartTime=now+2")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def unavailable_reason() -> str | None:
    """Why a local cluster cannot be started here, or None when it can."""
    if os.name != "posix" or not hasattr(os, "geteuid"):
        return "a local SLURM cluster needs Linux"
    if os.geteuid() != 0:
        return "a local SLURM cluster needs root (slurmd runs jobs as their users)"
    missing = [b for b in ("slurmctld", "slurmd", "munged", "sbatch") if not shutil.which(b)]
    if missing:
        return (f"SLURM is not installed (no {', '.join(missing)}); the tests do not install it: run "
                f"`scripts/slurm_local.sh install /tmp/slurm` or `apt-get install slurm-wlm munge` as root")
    return None


def require_slurm() -> bool:
    """CI sets ``DISTLAB_REQUIRE_SLURM=1``: a missing cluster is then a failure, not a skip."""
    return os.environ.get("DISTLAB_REQUIRE_SLURM", "") not in ("", "0")


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    reason = unavailable_reason()
    if reason:
        if require_slurm():
            pytest.fail(f"DISTLAB_REQUIRE_SLURM is set but {reason}")
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "SLURMCTLD_PORT": str(_free_port()), "SLURMD_PORT": str(_free_port())}
    t0 = time.monotonic()
    res = subprocess.run(["bash", str(SCRIPT), "start", str(root)], env=env, capture_output=True, text=True,
                         timeout=900)
    cluster = SlurmCluster(root, root / "slurm.conf", time.monotonic() - t0)
    try:
        if res.returncode == 3 and not require_slurm():
            pytest.skip(f"the local SLURM cluster cannot start here: {res.stderr.strip()[-500:]}")
        if res.returncode != 0:
            pytest.fail(f"could not start the local SLURM cluster (exit {res.returncode}): {res.stderr[-2000:]}")
        yield cluster
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(root)], env=env, capture_output=True, timeout=60)


# A stand-in for the interpreter a generated job runs (``--python``): records what the node would exec. A CPU
# machine cannot run a GPU job, but it can check that the job starts distlab's GPU launcher with the right flags.
_RECORDER = """#!/bin/bash
node=${{SLURM_NODEID:-0}}
printf '%s\\n' "$@" > {record}/argv-node$node
env > {record}/env-node$node
"""


def write_recorder(path: Path, record_dir: Path) -> Path:
    """An executable at ``path`` that writes its argv and environment to ``record_dir/{argv,env}-node<N>``."""
    record_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(_RECORDER.format(record=record_dir))
    path.chmod(0o755)
    return path


def recorded(record_dir: Path, node: int = 0) -> tuple[list[str], dict[str, str]]:
    """What the recorder saw on ``node``: its argv and its environment."""
    argv = (record_dir / f"argv-node{node}").read_text().splitlines()
    env = dict(line.split("=", 1) for line in (record_dir / f"env-node{node}").read_text().splitlines()
               if "=" in line)
    return argv, env


def launch_args(argv: list[str]):
    """``python -m distlab.cli train ...`` as distlab's own parser reads it: (options, overrides)."""
    from distlab.cli import build_parser

    assert argv[:3] == ["-m", "distlab.cli", "train"], argv
    return build_parser("train").parse_known_args(argv[2:])
