"""``suite run --dry-run`` plans, override validation of every shipped suite, device slots, report/slurm CLI."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from distlab.cli import main
from distlab.errors import DistlabError
from distlab.suite.runner import device_slots
from distlab.suite.spec import load_suite, shipped_suites


def _commands(stdout: str) -> list[list[str]]:
    """The planned ``distlab train`` argv (after ``-m distlab.cli``) of every run in a dry-run printout."""
    cmds = [shlex.split(line) for line in stdout.splitlines() if not line.startswith(("#", "suite "))]
    for argv in cmds:
        assert argv[1:3] == ["-m", "distlab.cli"], argv
    return [argv[3:] for argv in cmds]


def _ovr(argv: list[str]) -> dict[str, str]:
    return dict(a.split("=", 1) for a in argv if "=" in a and not a.startswith("-"))


def test_hierarchical_smoke_dry_run_prints_five_experiments(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["suite", "run", "hierarchical", "--smoke", "--seeds", "1", "--dry-run", "--procs", "1"]) == 0
    out = capsys.readouterr().out
    cmds = _commands(out)
    assert len(cmds) == 5
    seen = {}
    for argv in cmds:
        assert argv[:4] == ["train", "hrm", "--procs", "1"]
        o = _ovr(argv)
        name = Path(o["run.dir"]).name
        assert o["run.dir"] == f"experiment_results/hierarchical/{name}" and o["run.name"] == "seed0"
        seen[name] = (int(o["arch.H_cycles"]), int(o["arch.L_cycles"]))
        # smoke scale, published everything else, and the suite's world-size scaling rules
        assert o["steps"] == "40" and o["data.build"] == "sudoku" and o["arch.hidden_size"] == "64"
        assert o["arch.act"] == "q_learning" and o["scale.batch"] == "linear" and o["scale.lr"] == "sqrt"
        assert o["run.seed"] == "0"
    assert seen == {"H1xL1": (1, 1), "H2xL2": (2, 2), "H2xL4": (2, 4), "H4xL2": (4, 2), "H4xL4": (4, 4)}
    assert "5 experiments, 5 runs" in out
    assert not any(tmp_path.iterdir()), "a dry run must not write anything"


def test_cli_overrides_apply_to_every_run_and_reserved_keys_are_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["suite", "run", "augmentation", "--smoke", "--seeds", "0,5", "--dry-run", "lr=0.5",
                 "scale.lr=none"]) == 0
    cmds = _commands(capsys.readouterr().out)
    assert len(cmds) == 6
    assert all(_ovr(c)["lr"] == "0.5" and _ovr(c)["scale.lr"] == "none" for c in cmds)
    assert sorted({_ovr(c)["run.seed"] for c in cmds}) == ["0", "5"]
    assert sorted(_ovr(c)["data.num_aug"] for c in cmds) == ["0", "0", "10", "10", "3", "3"]
    assert main(["suite", "run", "baseline", "--dry-run", "run.dir=x"]) == 2
    assert "run.dir is set per run" in capsys.readouterr().err
    assert main(["suite", "run", "baseline", "--dry-run", "--sed", "2"]) == 2
    assert "did you mean --seeds" in capsys.readouterr().err
    assert main(["suite", "run", "hierarchicl", "--dry-run"]) == 2
    assert "did you mean 'hierarchical'" in capsys.readouterr().err


@pytest.mark.parametrize("name", shipped_suites())
def test_every_shipped_suite_plans_and_its_overrides_pass_train_validation(name, tmp_path, monkeypatch, capsys):
    """Each planned command (published size and every scale) must be accepted by ``distlab train hrm --dry-run``."""
    monkeypatch.chdir(tmp_path)
    suite = load_suite(name)
    assert {"smoke", "h200"} <= set(suite.scales)
    for scale in (None, *suite.scales):
        smoke = scale == "smoke"
        assert main(["suite", "run", name, "--seeds", "1", "--dry-run", *(["--scale", scale] if scale else [])]) == 0
        cmds = _commands(capsys.readouterr().out)
        assert len(cmds) == len(suite.experiments)
        for argv in cmds:
            rc = main([*argv, "--dry-run"])
            captured = capsys.readouterr()
            assert rc == 0, f"{name} scale={scale}: {captured.err}"
            config = captured.out
            o = _ovr(argv)
            assert f"steps: {o['steps']}\n" in config and f"hidden_size: {o['arch.hidden_size']}\n" in config
            if smoke:  # the smoke data is generated, never a placeholder path
                assert o["data.build"] == "sudoku" and "data.path" not in o and int(o["data.train_size"]) <= 64
    assert not any(tmp_path.iterdir())


def test_device_slots_split_gpus_into_disjoint_sets():
    visible = ["0", "1", "2", "3", "4", "5", "6", "7"]
    slots = device_slots(None, None, 4, visible)
    assert [s.cuda_devices for s in slots] == ["0,1", "2,3", "4,5", "6,7"]
    assert {s.flags for s in slots} == {("--gpus", "2")}
    assert [s.cuda_devices for s in device_slots(4, None, 2, ["3", "5", "6", "7"])] == ["3,5", "6,7"]
    assert device_slots(-1, None, 1, visible)[0].flags == ("--gpus", "8")
    assert [s.cuda_devices for s in device_slots(None, None, 2, [])] == [None, None]
    assert device_slots(None, 2, 3, visible)[2].flags == ("--procs", "2")
    with pytest.raises(DistlabError, match="split evenly"):
        device_slots(6, None, 4, visible)
    with pytest.raises(DistlabError, match="GPUs are visible"):
        device_slots(2, None, 1, [])
    with pytest.raises(DistlabError, match="not both"):
        device_slots(2, 2, 1, visible)


def test_device_slots_share_gpus_when_runs_outnumber_them():
    """Five small runs on one GPU all see that GPU; six on two GPUs alternate, three per GPU."""
    assert [(s.flags, s.cuda_devices) for s in device_slots(1, None, 5, ["3"])] == [(("--gpus", "1"), "3")] * 5
    assert [s.cuda_devices for s in device_slots(None, None, 6, ["0", "1"])] == ["0", "1"] * 3
    with pytest.raises(DistlabError, match="divisor or a multiple of 2"):
        device_slots(2, None, 3, ["0", "1"])


def test_slurm_command_and_create_slurm_write_the_same_scripts(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    common = ["--smoke", "--seeds", "2", "--gpus-per-node", "0", "--procs", "2", "--cpus-per-task", "2",
              "--mem", "2G", "--time", "30"]
    assert main(["suite", "slurm", "deep_transformer", "--out", "a", *common]) == 0
    out = capsys.readouterr().out
    assert "bash a/submit_all.sh" in out and "4 job arrays (8 runs)" in out
    assert main(["suite", "run", "deep_transformer", "--create-slurm", "--out", "b", *common]) == 0
    capsys.readouterr()
    names = sorted(p.name for p in (tmp_path / "a").glob("*.sbatch"))
    assert names == ["hrm.sbatch", "transformer_24.sbatch", "transformer_8.sbatch", "trm.sbatch"]
    for n in names:
        a_text = (tmp_path / "a" / n).read_text().replace(str(tmp_path / "a"), "")
        assert a_text == (tmp_path / "b" / n).read_text().replace(str(tmp_path / "b"), "")
    text = (tmp_path / "a" / "transformer_8.sbatch").read_text()
    assert "--procs 2" in text and "arch.num_layers=2" in text and "scale.batch=linear" in text
    assert "#SBATCH --array=0-1" in text and "#SBATCH --mem=2G" in text and "--gres" not in text
    assert main(["suite", "slurm", "baseline", "--mem", "lots"]) == 2
    assert "not a SLURM memory size" in capsys.readouterr().err


def test_report_of_a_missing_results_folder_says_what_to_do(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["suite", "report", "hierarchical"]) == 2
    assert "run the suite first" in capsys.readouterr().err


def test_force_reaches_every_run_of_a_suite(tmp_path, monkeypatch, capsys):
    """``suite run --force`` (and ``--create-slurm --force``) hands train's override of the doctor's memory refusal
    to every run; without it no run gets it."""
    monkeypatch.chdir(tmp_path)
    base = ["suite", "run", "hierarchical", "--smoke", "--seeds", "2", "--dry-run", "--procs", "1"]
    assert main(base) == 0
    plain = _commands(capsys.readouterr().out)
    assert main([*base, "--force"]) == 0
    forced = _commands(capsys.readouterr().out)
    assert len(forced) == len(plain) == 10
    assert not any("--force" in c for c in plain)
    for p, f in zip(plain, forced):  # the launch flags gain --force, before the overrides; nothing else changes
        assert f[:5] == ["train", "hrm", "--procs", "1", "--force"] and f[:4] + f[5:] == p
    assert not any(tmp_path.iterdir()), "a dry run must not write anything"
    assert main(["suite", "run", "hierarchical", "--smoke", "--seeds", "1", "--create-slurm", "--gpus-per-node", "0",
                 "--out", "sl", "--force"]) == 0
    scripts = list((tmp_path / "sl").glob("*.sbatch"))
    assert scripts and all("train hrm --procs 1 --force " in s.read_text() for s in scripts)


def test_only_runs_the_named_experiments_and_names_an_unknown_one(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["suite", "run", "hierarchical", "--smoke", "--seeds", "2", "--dry-run", "--procs", "1",
                 "--only", "H4xL2,H1xL1"]) == 0
    out = capsys.readouterr().out
    names = [Path(_ovr(argv)["run.dir"]).name for argv in _commands(out)]
    assert names == ["H1xL1", "H1xL1", "H4xL2", "H4xL2"]  # the suite's order, every seed
    assert "2 experiments, 4 runs" in out
    assert main(["suite", "slurm", "hierarchical", "--smoke", "--seeds", "1", "--only", "H2xL4",
                 "--out", str(tmp_path / "s")]) == 0
    assert sorted(p.name for p in (tmp_path / "s").glob("*.sbatch")) == ["H2xL4.sbatch"]
    for bad, words in (("H1xL9", ["no experiment 'H1xL9'", "did you mean", "H1xL1"]), ("H1xL1,", ["empty name"])):
        assert main(["suite", "run", "hierarchical", "--smoke", "--dry-run", "--only", bad]) == 2
        err = capsys.readouterr().err
        assert all(w in err for w in words) and "Traceback" not in err, err


def test_suite_list_names_every_shipped_suite_and_one_suites_experiments(capsys):
    assert main(["suite", "list"]) == 0
    out = capsys.readouterr().out
    for name in shipped_suites():
        suite = load_suite(name)
        line = next(ln for ln in out.splitlines() if ln.split()[:1] == [name])
        assert suite.recipe in line and f"{len(suite.experiments)} experiments" in line
    assert main(["suite", "list", "hierarchical"]) == 0
    out = capsys.readouterr().out
    assert "baseline H2xL2" in out and "H2xL2 *" in out
    rows = [ln.split()[0] for ln in out.splitlines()[1:]]
    assert rows == list(load_suite("hierarchical").experiments)
    assert "arch.H_cycles=4 arch.L_cycles=2" in next(ln for ln in out.splitlines() if ln.split()[:1] == ["H4xL2"])


ISSUE51_SUITES = Path(__file__).resolve().parents[3] / "benchmarks" / "suites"
# the keys each issue-51 suite's experiments may differ in (everything else equal, the 380 s included)
STUDIED = {"hierarchy_x4": {"arch.name", "arch.num_layers", "arch.hidden_size", "arch.puzzle_emb_ndim", "arch.mlp_t",
                            "arch.pos_encodings", "arch.L_layers", "arch.H_cycles", "arch.L_cycles"},
           "act_x4": {"arch.act"}}


@pytest.mark.parametrize("name", sorted(STUDIED))
def test_issue51_suite_plans_12_runs_3_per_gpu_that_differ_only_in_what_they_study(name, tmp_path, monkeypatch,
                                                                                     capsys):
    """The device command (--scale x4 --seeds 3 --gpus 4 --parallel 12) on a machine seen as 4 GPUs: every run on
    one GPU, each GPU hosting 3, the same 380 s and data, and each planned run accepted by `distlab train`."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("distlab.suite.runner.visible_gpus", lambda: ["0", "1", "2", "3"])
    assert main(["suite", "run", str(ISSUE51_SUITES / f"{name}.yaml"), "--scale", "x4", "--seeds", "3", "--gpus", "4",
                 "--parallel", "12", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "4 experiments, 12 runs" in out
    assert "12 at a time on " + ", ".join(["GPUs 0, GPUs 1, GPUs 2, GPUs 3"] * 3) in out
    cmds = _commands(out)
    first = _ovr(cmds[0])
    assert sorted(_ovr(c)["run.seed"] for c in cmds) == ["0"] * 4 + ["1"] * 4 + ["2"] * 4
    for argv in cmds:
        assert argv[:4] == ["train", "hrm", "--gpus", "1"]
        o = _ovr(argv)
        assert (o["run.time_limit_s"], o["data.test_size"], o["arch.hidden_size" if name == "act_x4" else "lr"]) == (
            "380", "1000", "128" if name == "act_x4" else "0.001")
        assert "eval.samples" not in o  # exact accuracy of the plain evaluation, the same for every experiment
        differ = {k for k in {*o, *first} if o.get(k) != first.get(k)} - {"run.seed", "run.dir", "run.name"}
        assert differ <= STUDIED[name]
        rc = main(["train", "hrm", "--procs", "1", *argv[4:], "--dry-run"])  # this CPU machine validates it
        assert rc == 0, capsys.readouterr().err
        capsys.readouterr()
    assert not any(tmp_path.iterdir())
