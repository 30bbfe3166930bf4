"""Issue 45.2 and 45.3: ``train`` and ``eval`` apply the doctor's memory verdict before a run directory exists
(``--force`` overrides), and ``eval`` names a corrupt newest checkpoint and the one it evaluates instead."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from clitools import run_cli  # noqa: E402

from distlab.cli import main  # noqa: E402

SMALL = ["steps=8", "log.every=4", "num_examples=128", "global_batch_size=16", "d_model=32", "eval_examples=32",
         "log.progress=false", "ckpt.every=4"]
HUGE_TOY = ["d_model=65536", "n_layers=64", "n_heads=8"]  # ~3.3e12 parameters: no machine holds their Adam states


def _error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("distlab: error:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_train_refuses_what_the_doctor_says_cannot_fit(tmp_path):
    """One line with the estimate, the capacity, the setting that shrinks it most and the override; no run dir."""
    p = run_cli(["train", "toy", *HUGE_TOY, "run.name=huge"], tmp_path, check=False, timeout=120)
    line = _error_line(p.stderr)
    assert p.returncode == 2
    for words in ("needs", "GiB per rank", "usable", "the doctor's estimate", "shrinks it most", "--force"):
        assert words in line, line
    assert not (tmp_path / "runs").exists()


def test_the_grpo_7b_run_of_issue_45_is_refused_on_this_cpu(tmp_path):
    """``model.source=random:qwen2.5-7b`` on a CPU: the doctor says 191 GiB; train used to start it and die in the
    allocator after writing its run directory."""
    p = run_cli(["train", "grpo", "model.source=random:qwen2.5-7b", "run.name=big"], tmp_path, check=False,
                timeout=300, env={"CUDA_VISIBLE_DEVICES": ""})
    line = _error_line(p.stderr)
    assert p.returncode == 2 and "cpu needs 191.64 GiB for policy, reference" in line and "--force" in line, line
    assert not (tmp_path / "runs").exists()


@pytest.fixture
def little_ram(monkeypatch):
    """The memory check sees ``n`` bytes of RAM available (the doctor's capacity on a CPU); the run itself, and
    the ranks' own check of the host memory their optimizers add, see the machine as it is."""
    from distlab.doctor import fit

    def set_to(n: int) -> None:
        monkeypatch.setattr(fit, "ram_available", lambda: n)

    return set_to


def test_force_starts_it_anyway(tmp_path, monkeypatch, capsys, little_ram):
    monkeypatch.chdir(tmp_path)
    little_ram(256 << 10)  # 236 KB usable: the toy's 457 KB of weights, gradients and Adam states do not fit
    argv = ["train", "toy", *SMALL, "steps=2", "run.name=forced"]
    assert main(argv) == 2
    line = _error_line(capsys.readouterr().err)
    assert "0.00 GiB usable" in line and "global_batch_size=8 shrinks it most" in line, line
    assert not (tmp_path / "runs").exists()
    assert main([*argv, "--force"]) == 0
    assert json.loads((tmp_path / "runs" / "forced" / "summary.json").read_text())["step"] == 2


def test_a_small_gpu_run_is_not_probed_and_a_large_one_is_sized_against_its_gpus(monkeypatch):
    """The GPU probe starts CUDA in a child (seconds): only a run needing a GiB or more on a device pays for it,
    and it is held against the GPUs it will use."""
    from distlab.config import finalize_config, resolve_config
    from distlab.doctor import checks
    from distlab.doctor.fit import Target, check_fits
    from distlab.errors import DistlabError
    from distlab.recipe import load_recipe

    probed = []
    gpu = {"index": 0, "name": "Fake", "free_bytes": 8 << 30, "total_bytes": 8 << 30}
    monkeypatch.setattr(checks, "probe_gpus", lambda *a: probed.append(1) or {"gpus": [gpu], "p2p": [],
                                                                               "error": None})
    recipe = load_recipe("toy")
    for overrides, refused in (([], False), (["d_model=4096", "n_layers=8", "n_heads=8"], True)):
        cfg, _ = finalize_config(recipe, resolve_config(recipe, [], overrides), 1)
        try:
            check_fits(recipe, cfg, [], overrides, 1, Target(1, gpus=1))
            got = None
        except DistlabError as exc:
            got = str(exc)
        assert (got is not None) == refused and len(probed) == refused, (overrides, got, probed)
    assert "7.20 GiB usable" in got and "--force" in got, got


def test_the_count_skips_initialisers_but_not_parameters():
    """train asks for the estimate before every launch: HRM's initialisers took seconds (minutes under load) and a
    huge model could not be allocated at all; the counts are those of the plain build."""
    from distlab.config import resolve_config
    from distlab.memory.estimate import recipe_specs
    from distlab.recipe import load_recipe

    for name, overrides in (("toy", []), ("hrm", ["arch.hidden_size=64", "arch.num_heads=2"])):
        recipe = load_recipe(name)
        cfg = resolve_config(recipe, [], overrides)
        assert recipe_specs(recipe, cfg).params == recipe.model_spec(cfg).params, name
    recipe = load_recipe("toy")
    start = time.monotonic()
    spec = recipe_specs(recipe, resolve_config(recipe, [], HUGE_TOY))
    assert spec.params > 3 * 10**12 and time.monotonic() - start < 60


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory) -> Path:
    """A toy run with checkpoints at steps 4 and 8."""
    work = tmp_path_factory.mktemp("guards")
    run_cli(["train", "toy", *SMALL, "run.name=two"], work)
    assert sorted(p.name for p in (work / "runs" / "two" / "checkpoints").iterdir()) == \
        ["step00000004", "step00000008"]
    return work / "runs" / "two"


def test_eval_names_the_corrupt_checkpoint_and_the_one_it_evaluates(toy_run, tmp_path):
    """It used to evaluate step 4 without a word (its log even said 'resumed from'); export already said so."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(toy_run, run)
    shard = max((run / "checkpoints" / "step00000008").glob("*.distcp"), key=lambda p: p.stat().st_size)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only the hash can tell
    shard.write_bytes(bytes(data))
    p = run_cli(["eval", str(run)], tmp_path)
    said = [ln for ln in p.stderr.splitlines() if "skipped corrupt checkpoint" in ln]
    assert len(said) == 1 and "step00000008" in said[0] and "evaluating step00000004" in said[0], p.stderr
    result = json.loads((run / "eval" / "step00000004" / "eval.json").read_text())
    assert result["checkpoint"].endswith("step00000004") and not (run / "eval" / "step00000008").exists()
    log = "".join(f.read_text() for f in (run / "eval" / "step00000004").glob("*.log"))
    assert "resumed from" not in log and "loaded" in log, log
    # export names the same thing in the same words
    p = run_cli(["export", str(run)], tmp_path)
    assert [ln for ln in p.stderr.splitlines() if "skipped corrupt checkpoint" in ln] == \
        [said[0].replace("evaluating", "exporting")], p.stderr


def test_eval_counts_weights_alone(toy_run, monkeypatch, capsys, little_ram, tmp_path):
    """A checkpoint that trained here is evaluated with less than training needed; one whose weights alone
    cannot fit is refused like train, and --force evaluates it anyway."""
    out = tmp_path / "eval"
    little_ram(300 << 10)  # 276 KB usable: below the toy's 457 KB of training state, above its 114 KB of weights
    assert main(["train", "toy", *SMALL, "run.name=other", f"run.dir={tmp_path}"]) == 2
    capsys.readouterr()
    assert main(["eval", str(toy_run), "-o", str(out)]) == 0 and (out / "eval.json").exists()
    little_ram(100 << 10)  # 92 KB usable: not even the weights
    assert main(["eval", str(toy_run), "-o", str(tmp_path / "refused")]) == 2
    line = _error_line(capsys.readouterr().err)
    assert "needs 0.00 GiB per rank" in line and "--force" in line and "shrinks" not in line, line
    assert not (tmp_path / "refused").exists()
    assert main(["eval", str(toy_run), "-o", str(tmp_path / "forced"), "--force"]) == 0
    assert os.path.exists(tmp_path / "forced" / "eval.json")
