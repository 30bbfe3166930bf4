"""Generated sbatch scripts: valid bash, the right #SBATCH directives, launch lines and requeue logic."""

from __future__ import annotations

import os
import re
import shlex
import subprocess

import pytest

from distlab.errors import DistlabError
from distlab.suite.slurm import REQUEUE_EXIT_CODE, write_slurm_scripts
from distlab.suite.spec import load_suite


def directives(path) -> list[str]:
    return re.findall(r"^#SBATCH (\S+)", path.read_text(), flags=re.M)


def bash_n(path) -> None:
    res = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_multi_node_gpu_scripts(tmp_path):
    suite = load_suite("hierarchical")
    bundle = write_slurm_scripts(suite, tmp_path / "slurm", gpus_per_node=8, nodes=2, cpus_per_task=32,
                                 mem="256G", time="12:00:00", seeds=3, partition="gpu", account="lab",
                                 extra_sbatch=["--constraint=h100", "#SBATCH --exclusive"], signal_s=300)
    assert sorted(p.stem for p in bundle.scripts) == sorted(suite.experiments)
    for script in [*bundle.scripts, bundle.submit_all]:
        bash_n(script)
        assert os.access(script, os.X_OK)
    script = tmp_path / "slurm" / "H4xL2.sbatch"
    d = directives(script)
    for want in ("--job-name=hierarchical-H4xL2", "--nodes=2", "--gres=gpu:8", "--cpus-per-task=32", "--mem=256G",
                 "--time=12:00:00", "--array=0-2", "--requeue", "--signal=B:USR1@300", "--partition=gpu",
                 "--account=lab", "--constraint=h100", "--exclusive", "--open-mode=append"):
        assert want in d, want
    text = script.read_text()
    assert 'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in text
    # srun starts distlab's own launcher once per node, which fills in its node rank and the first node's address
    launch = re.search(r"^LAUNCH=\((.*)\)$", text, flags=re.M).group(1)
    assert launch.startswith('srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 ') and " bash -c " in launch
    assert '--node-rank "$SLURM_NODEID" --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT"' in launch
    assert launch.endswith("distlab-node python -m distlab.cli") and "torch.distributed.run" not in launch
    assert re.search(r"^export PET_SIGNALS_TO_HANDLE=\S*SIGUSR1", text, flags=re.M)
    assert "trap forward_usr1 USR1" in text and 'kill -USR1 "$CHILD"' in text
    assert 'scontrol requeue "${SLURM_JOB_ID}"' in text and f"REQUEUE_EXIT={REQUEUE_EXIT_CODE}" in text
    # array task k runs exactly the RunSpec of seed k
    runs = [r for r in suite.runs(3) if r.experiment == "H4xL2"]
    for k, run in enumerate(runs):
        line, done = re.search(rf"^  {k}\) CMD=\((.*)\); DONE=(\S+); ;;$", text, flags=re.M).groups()
        assert shlex.split(line) == ["train", "hrm", "--gpus", "8", "--nodes", "2", "--rdzv-backend", "c10d",
                                     *run.overrides]
        assert shlex.split(done) == [str(run.out_dir / "summary.json")]
    submit = bundle.submit_all.read_text()
    assert all(f"{p.name}" in submit for p in bundle.scripts) and "sbatch --parsable" in submit


def test_single_node_cpu_scripts_omit_gres_and_use_procs(tmp_path):
    write_slurm_scripts(load_suite("augmentation"), tmp_path, gpus_per_node=0, nodes=1, cpus_per_task=4,
                        mem="8G", time="30", seeds=[4, 9], scale="smoke", procs_per_node=2,
                        python="/opt/py/bin/python3", requeue=False)
    script = tmp_path / "aug300.sbatch"
    bash_n(script)
    d = directives(script)
    assert not any(x.startswith("--gres") for x in d)
    assert "--array=0-1" in d and "--no-requeue" in d and "--requeue" not in d
    text = script.read_text()
    assert "LAUNCH=(/opt/py/bin/python3 -m distlab.cli)" in text
    assert "srun" not in text and "scontrol requeue" not in text
    assert re.search(r"^export PET_SIGNALS_TO_HANDLE=\S*SIGUSR1", text, flags=re.M)  # --procs runs torchrun
    line = re.search(r"^  1\) CMD=\((.*)\); DONE=\S+; ;;$", text, flags=re.M).group(1)
    argv = shlex.split(line)
    assert argv[:4] == ["train", "hrm", "--procs", "2"]
    assert "data.num_aug=3" in argv and "run.seed=9" in argv and "steps=40" in argv


@pytest.mark.parametrize("kwargs, message", [
    ({"mem": "256GB"}, "not a SLURM memory size"), ({"time": "12h"}, "not a SLURM time"),
    ({"nodes": 0}, "at least 1 node"), ({"gpus_per_node": -1}, "gpus_per_node"), ({"signal_s": 0}, "signal_s"),
])
def test_bad_resources_raise(tmp_path, kwargs, message):
    args = dict(gpus_per_node=1, nodes=1, cpus_per_task=1, mem="1G", time="10", seeds=1) | kwargs
    with pytest.raises(DistlabError, match=message):
        write_slurm_scripts(load_suite("baseline"), tmp_path, **args)


def test_cluster_fixture_explains_why_it_cannot_start(monkeypatch):
    import slurm_cluster

    monkeypatch.setattr(slurm_cluster.os, "geteuid", lambda: 1000)
    assert "needs root" in slurm_cluster.unavailable_reason()


# ---------------------------------------------------------------------------------------------- GPU nodes

def _commands(script) -> list[list[str]]:
    """The argv of every array task of a generated script."""
    return [shlex.split(m) for m in re.findall(r"^  \d+\) CMD=\((.*?)\);", script.read_text(), flags=re.M)]


def _launch_options(argv: list[str]):
    from distlab.cli import build_parser

    return build_parser("train").parse_known_args(argv)[0]


@pytest.mark.parametrize("gpus, nodes", [(1, 1), (8, 1), (4, 2)])
def test_gpu_node_jobs_launch_with_gpus_never_gloo_procs(tmp_path, gpus, nodes):
    bundle = write_slurm_scripts(load_suite("hierarchical"), tmp_path, gpus_per_node=gpus, nodes=nodes,
                                 time="1:00:00", seeds=2)
    for script in bundle.scripts:
        assert f"--gres=gpu:{gpus}" in directives(script)
        for argv in _commands(script):
            opts = _launch_options(argv)
            assert opts.gpus == gpus and opts.procs is None and opts.nodes == nodes, argv
            assert "dist.backend=gloo" not in argv and "dist.device=cpu" not in argv
        # CPUs and memory follow the GPU count (8 and 32G a GPU), not one fixed size for every node
        assert f"--cpus-per-task={8 * gpus}" in directives(script) and f"--mem={32 * gpus}G" in directives(script)


def test_cpu_node_jobs_launch_gloo_procs_and_size_per_process(tmp_path):
    bundle = write_slurm_scripts(load_suite("baseline"), tmp_path, gpus_per_node=0, nodes=1, time="10", seeds=1,
                                 procs_per_node=3)
    argv = _commands(bundle.scripts[0])[0]
    opts = _launch_options(argv)
    assert opts.procs == 3 and opts.gpus is None
    assert {"--cpus-per-task=12", "--mem=24G"} <= set(directives(bundle.scripts[0]))


def test_explicit_resources_and_per_gpu_amounts_win(tmp_path):
    write_slurm_scripts(load_suite("baseline"), tmp_path / "a", gpus_per_node=4, nodes=1, time="10", seeds=1,
                        cpus_per_gpu=6, mem_per_gpu="500M")
    assert {"--cpus-per-task=24", "--mem=2000M"} <= set(directives(tmp_path / "a" / "published.sbatch"))
    write_slurm_scripts(load_suite("baseline"), tmp_path / "b", gpus_per_node=4, nodes=1, time="10", seeds=1,
                        cpus_per_task=10, mem="100G")
    assert {"--cpus-per-task=10", "--mem=100G"} <= set(directives(tmp_path / "b" / "published.sbatch"))


def test_procs_on_a_gpu_node_is_refused(tmp_path):
    with pytest.raises(DistlabError, match=r"--procs 8 is for CPU nodes .* drop --procs or use --gpus-per-node 0"):
        write_slurm_scripts(load_suite("baseline"), tmp_path, gpus_per_node=8, nodes=1, time="10", seeds=1,
                            procs_per_node=8)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("scale, words", [(None, ["scale: full size", "--scale h200", "--scale smoke"]),
                                          ("smoke", ["scale: smoke", "leave --scale out for full size"])])
def test_header_states_the_scale_and_the_launch(tmp_path, scale, words):
    write_slurm_scripts(load_suite("hierarchical"), tmp_path, gpus_per_node=8, nodes=1, time="10", seeds=1,
                        scale=scale)
    header = (tmp_path / "H4xL2.sbatch").read_text().split("set -u")[0]
    for word in [*words, "launch: distlab train --gpus 8 (8 GPUs per node, NCCL)"]:
        assert word in header, word


# ---------------------------------------------------------------------------------------------- executing a job

def _fake_bin(tmp_path, record) -> tuple:
    """A folder with the recorder as ``fakepython`` and stand-ins for srun (one task per node, as SLURM sets
    them) and scontrol (two host names)."""
    from slurm_cluster import write_recorder

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_recorder(bin_dir / "fakepython", record)
    (bin_dir / "srun").write_text(f"""#!/bin/bash
while [[ "$1" == -* ]]; do echo "$1" >> {record}/srun-options; shift; done
for ((n = 0; n < SLURM_NNODES; n++)); do
  SLURM_NODEID=$n SLURM_PROCID=$n SLURM_STEP_ID=0 SLURM_NTASKS=$SLURM_NNODES "$@" &
done
wait
""")
    (bin_dir / "scontrol").write_text('#!/bin/bash\n[ "$1 $2" = "show hostnames" ] && printf "gpu-a\\ngpu-b\\n"\n')
    for tool in ("srun", "scontrol"):
        (bin_dir / tool).chmod(0o755)
    return bin_dir


def _job_env(bin_dir, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return {**env, "PATH": f"{bin_dir}:{env['PATH']}", "SLURM_JOB_ID": "4242", "SLURM_ARRAY_TASK_ID": "0", **extra}


def test_two_node_job_starts_one_distlab_launcher_per_node_with_its_rank(tmp_path):
    from distlab.cli import _launch_opts
    from distlab.launch.launcher import check_options
    from slurm_cluster import launch_args, recorded

    record = tmp_path / "record"
    bin_dir = _fake_bin(tmp_path, record)
    write_slurm_scripts(load_suite("baseline"), tmp_path / "s", gpus_per_node=8, nodes=2, time="10", seeds=1,
                        python="fakepython", setup=[f"PATH={bin_dir}:$PATH"])
    env = _job_env(bin_dir, SLURM_NNODES="2", SLURM_JOB_NODELIST="gpu-[a-b]", SLURM_CPUS_PER_TASK="64")
    proc = subprocess.run(["bash", str(tmp_path / "s" / "published.sbatch")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {"--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=64"} <= set(
        (record / "srun-options").read_text().split())
    for node in (0, 1):
        argv, node_env = recorded(record, node)
        opts, overrides = launch_args(argv)
        assert (opts.gpus, opts.procs, opts.nodes, opts.node_rank) == (8, None, 2, node)
        assert (opts.master_addr, opts.master_port, opts.rdzv_backend) == ("gpu-a", 20000 + 4242, "c10d")
        check_options(_launch_opts(opts))  # distlab's launcher accepts these flags
        assert "run.seed=0" in overrides
        # the launcher must not take itself for rank SLURM_PROCID of a 2-task job: it starts the 8 ranks itself
        assert "SLURM_PROCID" not in node_env and node_env["SLURM_NODEID"] == str(node)


def test_single_node_gpu_job_execs_distlab_train_gpus(tmp_path):
    from slurm_cluster import launch_args, recorded

    record = tmp_path / "record"
    bin_dir = _fake_bin(tmp_path, record)
    write_slurm_scripts(load_suite("baseline"), tmp_path / "s", gpus_per_node=8, nodes=1, time="10", seeds=1,
                        python=str(bin_dir / "fakepython"))
    proc = subprocess.run(["bash", str(tmp_path / "s" / "published.sbatch")], cwd=tmp_path, env=_job_env(bin_dir),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    opts, _ = launch_args(recorded(record)[0])
    assert opts.gpus == 8 and opts.procs is None and opts.nodes == 1
    assert not (record / "srun-options").exists()


def test_setup_runs_before_launch_and_a_failing_line_stops_the_job(tmp_path):
    from slurm_cluster import recorded

    record = tmp_path / "record"
    bin_dir = _fake_bin(tmp_path, record)
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "activate").write_text(f'export PATH="{bin_dir}:$PATH"\nexport VENV_ON="$UNSET_IN_ACTIVATE"yes\n')
    script = tmp_path / "s" / "published.sbatch"
    env = {**_job_env(tmp_path / "nothing"), "PATH": os.environ["PATH"]}
    # 'fakepython' is found only through the activated environment; activate reads an unset variable
    write_slurm_scripts(load_suite("baseline"), tmp_path / "s", gpus_per_node=1, nodes=1, time="10", seeds=1,
                        python="fakepython", setup=["source venv/bin/activate", "export SECOND=2"])
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, job_env = recorded(record)
    assert job_env["VENV_ON"] == "yes" and job_env["SECOND"] == "2"

    (record / "argv-node0").unlink()
    write_slurm_scripts(load_suite("baseline"), tmp_path / "s", gpus_per_node=1, nodes=1, time="10", seeds=1,
                        python="fakepython", setup=["source missing/bin/activate"])
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "--setup command failed: source missing/bin/activate; fix it and resubmit" in proc.stderr
    assert not (record / "argv-node0").exists()  # never trained in the wrong environment


# ---------------------------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("argv, words", [
    (["suite", "slurm", "baseline", "--python="], ["--python is empty", "--python python3"]),
    (["slurm", "toy", "--python", ""], ["--python is empty"]),
    (["suite", "slurm", "baseline", "--setup", " "], ["--setup is empty", "source venv/bin/activate"]),
    (["suite", "slurm", "baseline", "--gpus-per-node", "2", "--procs", "2"], ["--procs 2 is for CPU nodes"]),
    (["suite", "run", "baseline", "--partition", "gpu"], ["--partition only apply to SLURM scripts",
                                                          "add --create-slurm"]),
    (["suite", "run", "baseline", "--smoke", "--nodes", "2", "--setup", "x"], ["--nodes, --setup only apply"]),
    (["suite", "run", "baseline", "--create-slurm", "--gpus", "4"], ["--gpus-per-node 4"]),
    (["slurm", "toy", "--gpus", "2", "--mem-per-gpu", "32GB"], ["--mem-per-gpu '32GB'", "32G"]),
    (["suite", "slurm", "baseline", "--cpus-per-gpu", "0"], ["--cpus-per-gpu 0", "at least 1 CPU"]),
])
def test_slurm_mistakes_are_one_line_and_write_nothing(tmp_path, monkeypatch, capsys, argv, words):
    from distlab.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(w in err for w in words), err
    assert not list(tmp_path.iterdir())


def test_suite_run_create_slurm_honours_the_slurm_options(tmp_path, monkeypatch, capsys):
    from distlab.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["suite", "run", "baseline", "--create-slurm", "--smoke", "--seeds", "1", "--partition", "gpu",
                 "--gpus-per-node", "2", "--setup", "module load cuda"]) == 0
    assert "scale: smoke" in capsys.readouterr().out
    script = tmp_path / "slurm_scripts" / "published.sbatch"
    assert {"--partition=gpu", "--gres=gpu:2", "--time=24:00:00", "--cpus-per-task=16"} <= set(directives(script))
    assert "{ module load cuda\n}" in script.read_text()
    assert _launch_options(_commands(script)[0]).gpus == 2


def test_distlab_slurm_writes_the_same_launch_as_suites(tmp_path):
    from distlab.launch.slurm import write_job_script

    out = write_job_script("toy", [], ["steps=2"], tmp_path / "job.sh", gpus=4, nodes=2, time="10",
                           setup=["source venv/bin/activate"])
    text = out.read_text()
    argv = _commands(out)[0]
    opts = _launch_options(argv)
    assert (opts.gpus, opts.procs, opts.nodes, opts.rdzv_backend) == (4, None, 2, "c10d")
    assert {"--nodes=2", "--gres=gpu:4", "--cpus-per-task=32", "--mem=128G"} <= set(directives(out))
    assert "srun " in text and '--node-rank "$SLURM_NODEID"' in text and "{ source venv/bin/activate\n}" in text
    bash_n(out)
