"""The test command changes nothing on the system: SLURM is used when installed, never installed by a test."""

import os
import subprocess
from pathlib import Path

import slurm_cluster

REPO = Path(__file__).resolve().parents[1]


def _path_without_slurm(tmp_path: Path) -> tuple[str, Path]:
    """A PATH with no SLURM daemons and an ``apt-get`` that only records that it was called."""
    fake = tmp_path / "bin"
    fake.mkdir()
    marker = tmp_path / "apt-get-was-called"
    (fake / "apt-get").write_text(f"#!/bin/sh\ntouch {marker}\nexit 0\n")
    (fake / "apt-get").chmod(0o755)
    keep = [d for d in os.environ["PATH"].split(os.pathsep)
            if d and not any((Path(d) / b).exists() for b in ("slurmctld", "slurmd", "munged"))]
    return os.pathsep.join([str(fake), *keep]), marker


def test_start_without_slurm_exits_3_and_installs_nothing(tmp_path) -> None:
    path, marker = _path_without_slurm(tmp_path)
    res = subprocess.run(["bash", str(REPO / "scripts" / "slurm_local.sh"), "start", str(tmp_path / "c")],
                         env=dict(os.environ, PATH=path), capture_output=True, text=True, timeout=60)
    if os.geteuid() != 0:
        assert res.returncode == 3 and "root" in res.stderr
    else:
        assert res.returncode == 3, res.stderr
        assert "not installed" in res.stderr and "install" in res.stderr
    assert not marker.exists(), "slurm_local.sh start ran apt-get"


def test_fixture_names_the_reason_and_fails_only_when_required(tmp_path, monkeypatch) -> None:
    path, _ = _path_without_slurm(tmp_path)
    monkeypatch.setenv("PATH", path)
    reason = slurm_cluster.unavailable_reason()
    assert reason is not None
    if os.geteuid() == 0:
        assert "not installed" in reason and "slurm-wlm" in reason
    monkeypatch.setenv("DISTLAB_REQUIRE_SLURM", "0")
    assert not slurm_cluster.require_slurm()
    monkeypatch.setenv("DISTLAB_REQUIRE_SLURM", "1")
    assert slurm_cluster.require_slurm()
