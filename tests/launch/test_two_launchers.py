"""Two nodes as two launchers on one host: `--nodes 2 --node-rank R --master-addr` joins one job (torchrun's
c10d rendezvous), and that job trains exactly what one launcher of as many ranks trains."""

from __future__ import annotations

import os
import subprocess
import sys

from clitools import run_cli, summary
from mp import free_port

TOY = ["train", "toy", "steps=12", "log.every=4"]


def test_two_launchers_of_one_rank_equal_one_launcher_of_two(tmp_path):
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    nodes = [subprocess.Popen([sys.executable, "-m", "distlab.cli", *TOY, "--procs", "1", "--nodes", "2",
                               "--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", str(port),
                               "--rdzv-backend", "c10d", f"run.dir={tmp_path / 'two'}"],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in (0, 1)]
    outs = [p.communicate(timeout=400)[0] for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], "\n".join(outs)
    run_cli([*TOY, "--procs", "2", f"run.dir={tmp_path / 'one'}"], tmp_path)
    (two,), (one,) = (list((tmp_path / d).iterdir()) for d in ("two", "one"))
    assert two.name == one.name  # the same experiment: the name leaves out how many launchers ran it
    got, want = summary(two), summary(one)
    assert got["world_size"] == want["world_size"] == 2
    assert got["param_checksum"] == want["param_checksum"]
    assert got["train"]["loss"] == want["train"]["loss"]
