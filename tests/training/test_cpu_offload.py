"""dist.cpu_offload: FSDP2's CPU offload policy as a core option, on one process (a group of one) and on two."""

import pytest
import torch
from clitools import losses, run_cli

from distlab.config import DistConfig, Wrap
from distlab.runtime.dist import Runtime
from distlab.training.placement import compute_device
from distlab.training.wrap import wrap_model

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
        assert compute_device(wrapped) == rt.device  # where inputs and caches go, recorded by the wrap
        assert getattr(wrapped, "_distlab_offload_device", None) == rt.device
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


def test_soft_update_from_a_sharded_offloaded_source_into_a_plain_target():
    """A target critic (plain tensors, often on the CPU) follows a critic that FSDP2 shards and offloads: the update
    gathers each shard instead of mixing DTensors with plain tensors (it crashed so on an H100, 2026-11-26)."""
    import torch.distributed as dist

    from distlab.training.placement import soft_update_

    torch.manual_seed(0)
    source = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    target = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    expected = [0.75 * t.detach().clone() + 0.25 * s.detach().clone()
                for t, s in zip(target.parameters(), source.parameters())]
    rt = Runtime()
    try:
        sharded = wrap_model(source, rt, DistConfig(wrap=Wrap.fsdp, cpu_offload=True), shard_modules=list(source))
        soft_update_(target, sharded, 0.25)
    finally:
        dist.destroy_process_group()
    for got, want in zip(target.parameters(), expected):
        assert type(got.data) is torch.Tensor and torch.allclose(got, want, atol=1e-6)


def test_dist_wrap_is_every_trained_models_default_and_its_own_setting_wins():
    """dist.wrap=fsdp dist.cpu_offload=true used to reach no model of a multi-model recipe (each model's own wrap
    defaulted to ddp): a 3B SCoRe run so configured offloaded nothing and ran out of memory."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from distlab.config import ModelSettings, wrap_of
    from distlab.training.placement import place

    offload = DistConfig(wrap=Wrap.fsdp, cpu_offload=True)
    assert wrap_of(ModelSettings(), offload) == "fsdp" and wrap_of(ModelSettings(), DistConfig()) == "ddp"
    assert wrap_of(ModelSettings(wrap=Wrap.ddp), offload) == "ddp"
    try:
        placed = place("policy", torch.nn.Sequential(torch.nn.Linear(4, 8)), ModelSettings(), Runtime(), offload)
        assert all(isinstance(p, DTensor) and p.device.type == "cpu" for p in placed.parameters())
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_cpu_offload_is_refused_only_when_no_trained_model_is_sharded_and_the_doctor_counts_it():
    pytest.importorskip("transformers")
    from distlab.errors import DistlabError
    from distlab.launch.launcher import preflight
    from distlab.memory.estimate import recipe_specs

    base = ["model.source=tiny:llama-2l", "dist.cpu_offload=true"]
    recipe, cfg = preflight("grpo", [], [*base, "dist.wrap=fsdp"], 1)  # the policy inherits fsdp
    homes = {s.name: s.placement for s in recipe_specs(recipe, cfg)}
    assert homes["policy"] == "offload" and homes["reference"] == "device"
    with pytest.raises(DistlabError, match="offloads what FSDP2 shards"):
        preflight("grpo", [], [*base, "dist.wrap=fsdp", "models.policy.wrap=ddp"], 1)
    preflight("grpo", [], [*base, "models.policy.wrap=fsdp"], 1)


def test_run_names_do_not_change_when_a_model_inherits_its_wrap():
    from distlab.launch.launcher import preflight

    def name(*extra):
        return preflight("multitoy", [], list(extra), 1)[1].run.name

    default = name()
    assert default == name("models.policy.wrap=ddp", "models.critic.wrap=ddp", "models.reference.wrap=ddp") \
        == name("dist.wrap=fsdp")


def test_recipes_ask_where_a_model_computes_not_where_its_first_parameter_lies():
    """Under FSDP2's CPU offload (and the ``offload`` placement) the parameters live on the host while the model
    computes on its GPU; code that put inputs or a KV cache next to ``next(model.parameters())`` crashed the SCoRe
    3B offload row on an H100 ("Expected all tensors to be on the same device") on 2026-11-26."""
    from pathlib import Path

    import distlab

    root = Path(distlab.__file__).parent
    offenders = [f"{path.relative_to(root)}:{n}" for path in sorted(root.rglob("*.py"))
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if "parameters()).device" in line and path.name != "placement.py"]
    assert offenders == [], f"use distlab.training.placement.compute_device instead at {offenders}"
