import json

import pytest

from clitools import run_cli


def test_tensorboard_and_offline_wandb_sinks(tmp_path):
    pytest.importorskip("tensorboard")
    pytest.importorskip("wandb")
    run_cli(["train", "toy", "steps=4", "log.every=2", "num_examples=64", "global_batch_size=8", "d_model=16",
             "eval_examples=16", "log.tensorboard=true", "log.wandb=true", "run.name=sinks"], tmp_path,
            env={"WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path)})
    run = tmp_path / "runs" / "sinks"
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert list(run.glob("wandb/offline-run-*")), "W&B offline run directory missing"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in rows if r["split"] == "train"]
    assert steps == [2, 4] and all("examples_per_s" in r for r in rows if r["split"] == "train")
    m = json.loads((run / "manifest.json").read_text())
    assert m["world_size"] == 1 and "torch" in m["packages"] and m["command"].startswith("distlab train toy")
