"""dist.auto_micro_batch: same global batch, same samples in the same order, same losses; OOM as one line."""

import json

import pytest
import torch

from clitools import losses, run_cli
from distlab.training.micro_batch import FAKE_LIMIT_ENV, candidates

COMMON = ["steps=6", "log.every=1", "num_examples=128", "global_batch_size=16", "d_model=32", "eval_examples=16",
          "record_sample_ids=true", "--procs", "2"]


def _rows(run_dir, split):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["split"] == split]


def test_auto_micro_batch_keeps_global_batch_order_and_losses(tmp_path):
    # a fake device capacity of 3 examples: each rank's 8 examples go as 4 micro-batches of 2 (4 > 3 does not fit)
    run_cli(["train", "toy", *COMMON, "run.name=auto", "dist.auto_micro_batch=true"], tmp_path,
            env={FAKE_LIMIT_ENV: "3"})
    run_cli(["train", "toy", *COMMON, "run.name=explicit", "dist.grad_accum=4"], tmp_path)
    auto, explicit = tmp_path / "runs" / "auto", tmp_path / "runs" / "explicit"
    plan = json.loads((auto / "manifest.json").read_text())["auto_micro_batch"]
    assert plan == {"micro_batch": 2, "grad_accum": 4, "per_rank_batch": 8, "probed": True}
    ids_auto, ids_explicit = _rows(auto, "samples"), _rows(explicit, "samples")
    assert [r["sample_ids"] for r in ids_auto] == [r["sample_ids"] for r in ids_explicit]
    assert all(len(r["sample_ids"]) == 16 and r["micro_steps"] == 4 for r in ids_auto)  # the global batch
    # same micro-batches, same order of float operations: equal to 1e-6 relative
    assert losses(auto) == pytest.approx(losses(explicit), rel=1e-6)


def test_without_a_capacity_on_cpu_it_keeps_one_micro_batch(tmp_path):
    run_cli(["train", "toy", *COMMON[:-2], "run.name=cpu", "dist.auto_micro_batch=true"], tmp_path)
    plan = json.loads((tmp_path / "runs" / "cpu" / "manifest.json").read_text())["auto_micro_batch"]
    assert plan == {"micro_batch": 16, "grad_accum": 1, "per_rank_batch": 16, "probed": False}


def test_candidates_divide_the_rank_batch():
    assert candidates(12) == [12, 6, 4, 3, 2, 1]


def test_auto_and_explicit_accumulation_together_are_refused(tmp_path):
    p = run_cli(["train", "toy", "dist.auto_micro_batch=true", "dist.grad_accum=2"], tmp_path, check=False)
    assert p.returncode == 2 and "chooses dist.grad_accum itself" in p.stderr


def test_cuda_oom_anywhere_becomes_one_line_with_estimate_and_options(tmp_path, monkeypatch, capsys):
    import distlab.launch.worker as worker

    def fake_step(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB ... (a paragraph)")

    monkeypatch.setattr(worker, "run", fake_step)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    code = worker.main(["toy", "d_model=32"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1
    line = err[0]
    assert "CUDA out of memory on rank 0" in line and "distlab doctor --recipe toy` estimates" in line
    for option in ("dist.activation_checkpointing=blocks", "optim.state_dtype=int8", "dist.auto_micro_batch=true"):
        assert option in line


def test_peak_memory_in_every_train_row_and_snapshot_is_a_warning_on_cpu(tmp_path):
    run_cli(["train", "toy", "steps=4", "log.every=2", "d_model=32", "eval_examples=16", "run.name=mem",
                 "log.memory_snapshot=true"], tmp_path)
    run_dir = tmp_path / "runs" / "mem"
    train = _rows(run_dir, "train")
    assert len(train) == 2 and all(r["peak_rss_gib"] > 0 for r in train)
    assert "records CUDA allocations only" in (run_dir / "train.log").read_text()
    assert not list(run_dir.glob("memory_snapshot*"))
