"""What the README promises and nothing else checked: presets resolve, grad_accum works in HRM, results are
strict JSON without GPU fields on CPU, the manifest records world-size scaling, one rank starts under torchrun."""

import importlib.metadata as md
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from clitools import run_cli

TINY_HRM = ["data.build=sudoku", "data.train_size=64", "data.test_size=16", "data.workers=1", "data.blanks=10",
            "global_batch_size=8", "steps=4", "log.every=1", "log.progress=false", "arch.hidden_size=32",
            "arch.num_heads=2", "arch.H_layers=1", "arch.L_layers=1", "arch.H_cycles=2", "arch.L_cycles=2",
            "arch.halt_max_steps=3", "arch.puzzle_emb_ndim=32", "arch.forward_dtype=float32",
            "optimizer=adamw", "lr=1e-3", "lr_warmup_steps=2", "dist.device=cpu"]
# what a preset needs to resolve on a machine without its model weights or GPUs
PRESET_EXTRAS = {"grpo": ["model.source=tiny:llama-2l"]}


def _strict_json(path: Path):
    """Parse as a strict reader would: NaN and Infinity are not JSON."""
    def refuse(token):
        raise AssertionError(f"{path.name} contains {token}, which is not JSON")
    return json.loads(path.read_text(), parse_constant=refuse)


def _keys(obj, prefix=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield f"{prefix}{k}"
            yield from _keys(v, f"{prefix}{k}.")
    elif isinstance(obj, list):
        for v in obj:
            yield from _keys(v, prefix)


def _presets():
    from distlab.recipe import load_recipe

    out = []
    for ep in md.entry_points(group="distlab.recipes"):
        recipe = load_recipe(ep.name)
        for p in sorted(recipe.presets_dir.glob("*.yaml")) if recipe.presets_dir else []:
            out.append((ep.name, p.stem))
    return out


@pytest.mark.parametrize("recipe,preset", _presets())
def test_every_shipped_preset_resolves(recipe, preset, capsys, tmp_path, monkeypatch) -> None:
    from distlab.cli import main

    monkeypatch.chdir(tmp_path)
    rc = main(["train", recipe, "--config", preset, "--show-config", *PRESET_EXTRAS.get(recipe, [])])
    out = capsys.readouterr().out
    assert rc == 0
    cfg = yaml.safe_load(out)
    assert cfg["run"]["name"]  # named, i.e. finalized like a real start


@pytest.fixture(scope="module")
def hrm_runs(tmp_path_factory):
    """The same tiny HRM run with dist.grad_accum 1 and 2 (one process each)."""
    work = tmp_path_factory.mktemp("accum")
    for accum in (1, 2):
        run_cli(["train", "hrm", *TINY_HRM, f"dist.grad_accum={accum}", f"run.name=accum{accum}"], work)
    return work / "runs"


def _train_rows(run: Path):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["split"] == "train"]


def test_hrm_grad_accum_is_honoured_and_matches_one_big_batch(hrm_runs) -> None:
    """Each micro-batch slot keeps its own ACT carry, so 2 micro-batches replay the 1-batch run exactly."""
    one, two = _train_rows(hrm_runs / "accum1"), _train_rows(hrm_runs / "accum2")
    assert [r["step"] for r in one] == [r["step"] for r in two] == [1, 2, 3, 4]
    for a, b in zip(one, two):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4, abs=1e-6)
        assert b["halted"] == a["halted"]
    assert yaml.safe_load((hrm_runs / "accum2" / "config.yaml").read_text())["dist"]["grad_accum"] == 2


def test_hrm_grad_accum_feeds_micro_batches(hrm_runs, monkeypatch) -> None:
    """Equal losses alone would not show the split happened: count the rows each forward pass gets."""
    import distlab.recipes.hrm.train as hrm_train
    from distlab.launch.worker import run

    sizes = []
    real = hrm_train.make_batch

    def spy(split, idx, *args, **kwargs):
        sizes.append(len(idx))
        return real(split, idx, *args, **kwargs)

    monkeypatch.setattr(hrm_train, "make_batch", spy)
    monkeypatch.chdir(hrm_runs.parent)  # the dataset built for the fixture's runs
    run("hrm", [], [*TINY_HRM, "steps=2", "dist.grad_accum=4", "run.name=spy", "data.test_size=16"])
    assert sizes == [2] * 8  # 2 steps x 4 micro-batches of 8 / 4 rows


def test_hrm_grad_accum_must_divide_the_batch(tmp_path) -> None:
    proc = run_cli(["train", "hrm", *TINY_HRM, "dist.grad_accum=3", "--dry-run"], tmp_path, check=False)
    assert proc.returncode == 2 and "grad_accum 3" in proc.stderr


def test_summary_and_eval_json_are_strict_json_without_gpu_fields_on_cpu(hrm_runs) -> None:
    run = hrm_runs / "accum1"
    summary = _strict_json(run / "summary.json")
    assert summary["status"] == "completed"
    gpu_keys = [k for k in _keys(summary) if "gpu" in k.lower() or "cuda" in k.lower() or "mfu" in k.lower()]
    assert not gpu_keys, gpu_keys
    assert summary["eval"]["device_seconds"] > 0
    for line in (run / "metrics.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda t: pytest.fail(f"metrics.jsonl holds {t}"))
    _strict_json(run / "manifest.json")


def test_manifest_records_world_size_scaling(tmp_path) -> None:
    run_cli(["train", "toy", "steps=2", "global_batch_size=8", "lr=0.01", "scale.batch=linear", "scale.lr=sqrt",
             "run.name=scaled", "--procs", "2"], tmp_path)
    manifest = _strict_json(tmp_path / "runs" / "scaled" / "manifest.json")
    assert manifest["world_size"] == 2
    applied = {r["key"]: r for r in manifest["scaling_applied"]}
    assert applied["global_batch_size"]["before"] == 8 and applied["global_batch_size"]["after"] == 16
    assert applied["global_batch_size"]["rule"] == "linear"
    assert applied["lr"]["factor"] == pytest.approx(2 ** 0.5)
    assert applied["lr"]["after"] == pytest.approx(0.01 * 2 ** 0.5)
    cfg = yaml.safe_load((tmp_path / "runs" / "scaled" / "config.yaml").read_text())
    assert cfg["global_batch_size"] == 16  # the run used what the manifest says


def test_one_rank_starts_under_torchrun(tmp_path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=1", "--standalone",
                           "-m", "distlab.launch.worker", "toy", "steps=2", "run.name=torchrun1"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "runs" / "torchrun1"
    assert _strict_json(run / "summary.json")
    manifest = _strict_json(run / "manifest.json")
    assert manifest["world_size"] == 1 and manifest["launcher"] == "torchrun"


def test_hrm_eval_reports_blank_cells_and_the_copy_baseline(hrm_runs) -> None:
    """Beside exact accuracy: the cells that were blank, and what copying the input would score."""
    ev = _strict_json(hrm_runs / "accum1" / "summary.json")["eval"]
    assert ev["blank_cells"] == 16 * 10  # 16 test puzzles with 10 blanks each
    assert 0.0 <= ev["blank_accuracy"] <= 1.0
    assert ev["copy_baseline_token_accuracy"] == pytest.approx(71 / 81)  # the 71 clues of each puzzle
    assert ev["copy_baseline_exact_accuracy"] == 0.0
    log = (hrm_runs / "accum1" / "train.log").read_text()
    assert "blank cells" in log and "copy-the-input baseline" in log


def test_eval_command_prints_a_table_not_a_dict(hrm_runs) -> None:
    run = hrm_runs / "accum1"
    proc = run_cli(["eval", str(run)], hrm_runs.parent)
    out = proc.stdout + proc.stderr
    assert "┃ metric" in out and "exact_accuracy" in out and "blank_accuracy" in out
    assert "{'" not in out
    ev = _strict_json(next((run / "eval").glob("step*/eval.json")))
    assert ev["exact_accuracy"] == _strict_json(run / "summary.json")["eval"]["exact_accuracy"]


def test_cell_counts_separate_blanks_from_clues() -> None:
    import torch

    from distlab.recipes.hrm.evaluation import _cell_metrics, _count_cells

    cells = dict.fromkeys(("tokens", "blank", "blank_correct", "copy_correct", "copy_exact"), 0.0)
    inputs = torch.tensor([[1, 3, 4], [2, 3, 4], [1, 1, 4]])
    labels = torch.tensor([[2, 3, 4], [2, 3, 4], [-100, -100, -100]])  # the last row is padding
    preds = torch.tensor([[2, 3, 5], [2, 3, 4], [0, 0, 0]])
    _count_cells(cells, inputs, labels, preds, keep=torch.tensor([True, True, False]))
    m = _cell_metrics({**cells, "count": 2.0})
    assert (m["blank_cells"], m["blank_accuracy"]) == (1, 1.0)  # one blank, filled right; the wrong cell was a clue
    assert m["copy_baseline_token_accuracy"] == pytest.approx(5 / 6)
    assert m["copy_baseline_exact_accuracy"] == 0.5  # the second puzzle had nothing to fill
