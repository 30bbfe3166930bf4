"""dist.comm_hook: DDP gradients with fp16/bf16/PowerSGD compression stay near plain all-reduce (2 gloo ranks)."""

import pytest
import torch

from clitools import losses, run_cli, summary
from distlab.training.comm_hooks import register_comm_hook
from mp import run_ranks

# relative error of the averaged gradient: 16-bit rounding of each bucket (fp16 ~2^-11, bf16 ~2^-8 per value)
TOLERANCE = {"none": 1e-6, "fp16": 2e-3, "bf16": 1.6e-2, "powersgd": 1e-4}


def _grads(rank, world_size, hook):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64))
    ddp = DDP(model, broadcast_buffers=False)
    # rank 8 >= the rank of the averaged gradient of each matrix (2 ranks x 4 examples), so PowerSGD's
    # one power iteration reproduces it up to float error once it compresses (from iteration 2 on)
    register_comm_hook(ddp, hook, None, powersgd_rank=8, powersgd_start_iter=2)
    gen = torch.Generator().manual_seed(100 + rank)
    for _ in range(3):  # the third backward is compressed by PowerSGD too (two plain iterations first)
        ddp.zero_grad()
        ddp(torch.randn(4, 64, generator=gen)).square().sum().backward()
    return [p.grad.numpy().copy() for p in model.parameters()]  # numpy: pickled by value across processes


@pytest.mark.parametrize("hook", ["fp16", "powersgd"])  # bf16: DDP allows it on NCCL only (test below)
def test_compressed_gradients_stay_near_plain_all_reduce(hook):
    plain = [[torch.from_numpy(g) for g in r] for r in run_ranks(_grads, 2, "none")]
    got = [[torch.from_numpy(g) for g in r] for r in run_ranks(_grads, 2, hook)]
    assert all(torch.equal(a, b) for a, b in zip(plain[0], plain[1]))  # ranks agree
    for want, have in zip(plain[0], got[0]):
        err = float((have - want).norm() / want.norm())
        assert err < TOLERANCE[hook], (hook, err)
    for a, b in zip(got[0], got[1]):  # compressed all-reduce still leaves every rank the same gradient
        assert torch.equal(a, b)


def test_toy_trains_with_powersgd_on_two_ranks(tmp_path):
    common = ["train", "toy", "steps=12", "log.every=1", "num_examples=128", "global_batch_size=8", "d_model=32",
              "eval_examples=16", "--procs", "2"]
    run_cli([*common, "run.name=plain"], tmp_path)
    run_cli([*common, "run.name=psgd", "dist.comm_hook=powersgd", "dist.powersgd_rank=4",
             "dist.powersgd_start_iter=2"], tmp_path)
    plain, psgd = losses(tmp_path / "runs" / "plain"), losses(tmp_path / "runs" / "psgd")
    assert psgd[:2] == pytest.approx(plain[:2], rel=1e-6)  # the plain all-reduce steps before compression
    assert psgd[-1] < psgd[0] and abs(psgd[-1] - plain[-1]) < 0.1 * plain[0]
    assert summary(tmp_path / "runs" / "psgd")["status"] == "completed"


@pytest.mark.parametrize("override, message", [
    (["dist.comm_hook=bf16", "dist.wrap=fsdp"], "dist.comm_hook=bf16 compresses DDP"),
    (["dist.comm_hook=bf16", "dist.device=cpu"], "dist.comm_hook=bf16 needs NCCL"),
    (["dist.comm_hook=powersgd", "dist.powersgd_start_iter=1"], "dist.powersgd_start_iter=1 is invalid"),
    (["dist.comm_hook=powersgd", "dist.powersgd_rank=0"], "dist.powersgd_rank=0 is invalid"),
])
def test_hook_combinations_that_cannot_work_are_refused(tmp_path, override, message):
    p = run_cli(["train", "toy", *override], tmp_path, check=False)
    assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1


def _bf16_on_gloo(rank, world_size):
    from torch.nn.parallel import DistributedDataParallel as DDP

    from distlab.errors import DistlabError

    try:
        register_comm_hook(DDP(torch.nn.Linear(4, 4)), "bf16")
    except DistlabError as exc:
        return str(exc)
    return "registered"


def test_bf16_hook_on_gloo_is_a_one_line_error_at_run_time():
    assert all("needs NCCL" in msg and "\n" not in msg for msg in run_ranks(_bf16_on_gloo, 2))
