"""dist.activation_checkpointing: same losses as without it, blocks found through the model's declaration."""

import pytest
import torch

from clitools import losses, run_cli, summary
from distlab.errors import DistlabError
from distlab.training.activation_ckpt import apply_activation_checkpointing, chosen_blocks, declared_blocks

COMMON = ["steps=8", "log.every=1", "num_examples=128", "global_batch_size=8", "d_model=32", "n_layers=3",
          "eval_examples=16"]


def _losses(tmp_path, name, *extra, procs=None):
    args = ["train", "toy", *COMMON, f"run.name={name}", *extra] + (["--procs", str(procs)] if procs else [])
    run_cli(args, tmp_path)
    return losses(tmp_path / "runs" / name), summary(tmp_path / "runs" / name)


@pytest.mark.parametrize("mode", ["blocks", "selective"])
def test_checkpointing_keeps_losses_on_two_ddp_ranks(tmp_path, mode):
    # recomputation replays the same float ops in the same order: losses agree to 1e-6 relative (bitwise on CPU)
    plain, _ = _losses(tmp_path, "plain", procs=2)
    ckpt, s = _losses(tmp_path, mode, f"dist.activation_checkpointing={mode}", procs=2)
    assert ckpt == pytest.approx(plain, rel=1e-6)
    assert s["status"] == "completed"


def test_checkpointing_under_fsdp2_keeps_losses(tmp_path):
    # the checkpoint wrappers are what FSDP2 shards: same losses as FSDP2 without them, on 2 gloo ranks
    plain, _ = _losses(tmp_path, "fsdp", "dist.wrap=fsdp", procs=2)
    ckpt, s = _losses(tmp_path, "fsdp-ckpt", "dist.wrap=fsdp", "dist.activation_checkpointing=blocks", procs=2)
    assert ckpt == pytest.approx(plain, rel=1e-6)
    assert s["status"] == "completed"


class _Net(torch.nn.Module):
    def __init__(self, n=4):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()) for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class _Declaring(_Net):
    def checkpoint_blocks(self):
        return list(self.layers)[1:]


def _grads(model, x, run=None):
    model.zero_grad()
    (model if run is None else run)(x).square().sum().backward()
    return {n.replace("_checkpoint_wrapped_module.", ""): p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("compile_backend", [None, "aot_eager"])
def test_wrapped_blocks_give_the_same_gradients_also_compiled(compile_backend):
    torch.manual_seed(0)
    ref = _Net()
    model = _Net()
    model.load_state_dict(ref.state_dict())
    wrappers = apply_activation_checkpointing(model, "blocks", shard_modules=list(model.layers))
    assert len(wrappers) == 4
    assert set(model.state_dict()) == set(ref.state_dict())  # checkpoints load with and without the option
    run = torch.compile(model, backend=compile_backend) if compile_backend else model
    x = torch.randn(5, 8)
    want, got = _grads(ref, x), _grads(model, x, run)
    for name, g in want.items():
        torch.testing.assert_close(got[name], g, rtol=1e-6, atol=1e-7)


def test_model_declaration_wins_and_selective_takes_every_other():
    model = _Declaring(5)
    assert declared_blocks(model, shard_modules=[model.layers[0]]) == list(model.layers)[1:]
    assert chosen_blocks(list(model.layers), "selective") == [model.layers[0], model.layers[2], model.layers[4]]


def test_model_without_blocks_is_refused_in_one_line():
    with pytest.raises(DistlabError, match="declares no blocks") as err:
        apply_activation_checkpointing(torch.nn.Linear(2, 2), "blocks")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("override, message", [
    ("dist.activation_checkpointing=all", "dist.activation_checkpointing"),
    ("dist.comm_hook=int4", "dist.comm_hook"),
    ("optim.state_dtype=fp8", "optim.state_dtype"),
])
def test_bad_values_are_refused_at_composition(tmp_path, override, message):
    p = run_cli(["train", "toy", override], tmp_path, check=False)
    assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_recipe_that_does_not_honour_an_option_refuses_it(tmp_path):
    p = run_cli(["train", "ppo", "dist.activation_checkpointing=blocks"], tmp_path, check=False)
    assert p.returncode == 2 and "ignores dist.activation_checkpointing" in p.stderr
