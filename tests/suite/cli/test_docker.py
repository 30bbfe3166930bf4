"""Dockerfile and docker-compose.yml (no Docker engine here): structure, GPU reservation, mounts, commands."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from distlab.cli import build_parser
from distlab.suite.cli import cmd_run

REPO = Path(__file__).resolve().parents[3]
MOUNTS = {"./data": "/workspace/data", "./runs": "/workspace/runs",
          "./experiment_results": "/workspace/experiment_results", "./logs": "/workspace/logs"}


def _services() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]


def test_compose_services_reserve_all_gpus_and_mount_the_results():
    services = _services()
    assert set(services) == {"hrm", "hrm-distributed"}
    for name, svc in services.items():
        devices = svc["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}], name
        assert re.fullmatch(r"\d+(\.\d+)?[kmg]b", str(svc["shm_size"]).lower()), svc["shm_size"]
        mounts = dict(v.split(":", 1) for v in svc["volumes"])
        assert mounts == MOUNTS, name
        assert svc["working_dir"] == "/workspace" and svc["build"] == "."
    hrm = services["hrm"]
    assert hrm["stdin_open"] is True and hrm["tty"] is True and "profiles" not in hrm
    assert services["hrm-distributed"]["profiles"] == ["distributed"]


def test_distributed_service_runs_the_baseline_suite_on_all_gpus():
    command = _services()["hrm-distributed"]["command"]
    assert command[0] == "distlab"
    args, extra = build_parser().parse_known_args(command[1:])
    assert args.func is cmd_run and extra == []
    assert (args.suite, args.gpus, args.procs, args.parallel, args.scale) == ("baseline", -1, None, 1, None)


def test_dockerfile_installs_distlab_with_its_extras_on_a_cuda_pytorch_base():
    text = (REPO / "Dockerfile").read_text()
    base = re.search(r"^FROM\s+(\S+)", text, flags=re.M).group(1)
    assert re.fullmatch(r"pytorch/pytorch:\d+\.\d+\.\d+-cuda\d+\.\d+-cudnn\d+-runtime", base), base
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = re.search(r'pip install "\.\[([\w,]+)\]"', text).group(1).split(",")
    assert extras and set(extras) <= set(project["optional-dependencies"])
    copied = [w for line in re.findall(r"^COPY\s+(.+)$", text, flags=re.M) for w in line.split()[:-1]]
    assert "pyproject.toml" in copied and "src" in copied
    if "readme" in project:  # setuptools needs it to build the wheel
        assert project["readme"] in copied
    ignored = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines()
               if ln.strip() and not ln.startswith("#")]
    assert not {"src", "pyproject.toml", "README.md"} & set(ignored)
    assert {"data", "runs", "experiment_results", "logs", ".git"} <= set(ignored)
