"""dist.cpu_offload: FSDP2's CPU offload policy as a core option, on one process (a group of one) and on two."""

import pytest
import torch
from clitools import losses, run_cli

from distlab.config import DistConfig, Wrap
from distlab.dist import Runtime
from distlab.wrap import wrap_model

COMMON = ["steps=8", "global_batch_size=16", "num_examples=128", "seq_len=16", "d_model=32", "n_layers=2",
          "log.every=1", "log.progress=false", "ckpt.every=4"]


def test_one_process_shards_into_a_group_of_one_and_keeps_weights_on_the_cpu():
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    rt = Runtime()
    try:
        wrapped = wrap_model(model, rt, DistConfig(wrap=Wrap.fsdp, cpu_offload=True), shard_modules=list(model))
        assert dist.is_initialized() and dist.get_world_size() == 1 and not rt.distributed
        assert all(isinstance(p, DTensor) and p.device.type == "cpu" for p in wrapped.parameters())
        opt = torch.optim.AdamW(wrapped.parameters(), lr=0.1)
        wrapped(torch.ones(3, 4)).sum().backward()
        opt.step()
    finally:
        dist.destroy_process_group()


def test_offloaded_training_matches_ddp_and_resumes_across_world_sizes(tmp_path):
    def run(name, *extra, procs=None):
        run_cli(["train", "toy", *COMMON, f"run.name={name}", *extra] + (["--procs", str(procs)] if procs else []),
                tmp_path)

    run("ddp", procs=2)
    run("offl", "dist.wrap=fsdp", "dist.cpu_offload=true", "run.stop_at=4", procs=2)
    run("offl", "dist.wrap=fsdp", "dist.cpu_offload=true")  # resumed on one process, still offloaded
    assert losses(tmp_path / "runs" / "offl") == pytest.approx(losses(tmp_path / "runs" / "ddp"), rel=1e-4, abs=1e-5)
