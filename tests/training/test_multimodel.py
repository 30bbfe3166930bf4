"""Several placed models per run (the ``multitoy`` recipe): registry, resume, placement, soft updates, offload."""

import json
import shutil

import pytest
import torch
from torch import nn

from clitools import run_cli, run_clis, summary
from distlab.config import DistConfig
from distlab.errors import DistlabError
from distlab.training.placement import compute_device, offload, soft_update_, validate_placement

COMMON = ["steps=12", "global_batch_size=16", "num_examples=256", "log.every=1"]
PIECES = ("policy", "critic", "target_critic", "ema", "policy_optim", "critic_optim", "sampler", "step")


def _args(name, *extra, procs=2):
    return ["train", "multitoy", *COMMON, f"run.name={name}", *extra, "--procs", str(procs)]


def _train(tmp_path, name, *extra, procs=2, check=True):
    return run_cli(_args(name, *extra, procs=procs), tmp_path, check=check)


def _losses(run_dir):
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [v for r in rows if r["split"] == "train" for v in (r["pi_loss"], r["v_loss"])]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One uninterrupted 2-rank run, one cut at step 6; the cut is copied and resumed on 2, 1 and 4 ranks."""
    d = tmp_path_factory.mktemp("multi")
    run_clis([_args("full"), _args("cut", "run.stop_at=6")], d)  # independent runs, side by side
    for n in (1, 4):
        shutil.copytree(d / "runs" / "cut", d / "runs" / f"cut{n}")
    cut_state = summary(d / "runs" / "cut")
    run_clis([_args(name, procs=procs) for name, procs in (("cut", 2), ("cut1", 1), ("cut4", 4))], d)
    return d, cut_state


def test_resume_on_same_world_size_is_bitwise(runs):
    d, cut = runs
    assert cut["status"] == "preempted" and cut["step"] == 6
    full, resumed = summary(d / "runs" / "full"), summary(d / "runs" / "cut")
    for piece in PIECES:  # every registered piece came back exactly, and the rest of training matched
        assert resumed["restored"][piece] == cut["final"][piece], piece
        assert resumed["final"][piece] == full["final"][piece], piece
    assert _losses(d / "runs" / "cut") == _losses(d / "runs" / "full")


@pytest.mark.parametrize("procs", [1, 4])
def test_resume_on_another_world_size_restores_every_piece(runs, procs):
    d, cut = runs
    resumed = summary(d / "runs" / f"cut{procs}")
    assert resumed["world_size"] == procs and resumed["step"] == 12
    for piece in PIECES:  # replicated state does not depend on the world size that saved it
        assert resumed["restored"][piece] == cut["final"][piece], piece
    full = _losses(d / "runs" / "full")
    got = _losses(d / "runs" / f"cut{procs}")
    assert len(got) == len(full) == 24
    assert got == pytest.approx(full, rel=1e-4, abs=1e-6)  # only the reduction order differs
    assert resumed["final"]["ema"] == pytest.approx(summary(d / "runs" / "full")["final"]["ema"], rel=1e-5)


def test_frozen_reference_is_not_in_the_checkpoint(runs):
    from torch.distributed.checkpoint import FileSystemReader

    d, _ = runs
    ckpt = sorted((d / "runs" / "full" / "checkpoints").glob("step*"))[-1]
    meta = json.loads((ckpt / "extra.json").read_text())
    assert meta["models"] == ["critic", "policy"] and meta["objects"] == ["ema", "sampler", "target_critic"]
    keys = list(FileSystemReader(str(ckpt)).read_metadata().state_dict_metadata)
    assert any(k.startswith("models.policy.") for k in keys)
    assert any(k.startswith("objects.target_critic.") for k in keys)
    assert not any("reference" in k for k in keys)


@pytest.mark.parametrize("override, message", [
    ("placement.policy=cuda:0", "has no GPU"),
    ("placement.refrence=cpu", "did you mean reference"),
    ("placement.reference=gpu1", "is not one of device, cpu, offload, cuda:N"),
    ("placement.policy=offload", "needs a frozen model"),
    ("dist.devices_per_rank=0", "dist.devices_per_rank=0"),
])
def test_placement_errors_fail_before_any_process(tmp_path, override, message):
    proc = _train(tmp_path, "bad", override, procs=1, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert not (tmp_path / "runs").exists()


def test_devices_per_rank_beyond_the_gpus_is_refused():
    cfg = DistConfig(device="cuda", devices_per_rank=2)
    validate_placement({"policy": "cuda:1"}, ["policy"], cfg, gpus_per_node=4, procs_per_node=2)
    with pytest.raises(DistlabError, match="need 6 GPUs but 4 are visible"):
        validate_placement({"policy": "cuda:1"}, ["policy"], cfg, gpus_per_node=4, procs_per_node=3)
    with pytest.raises(DistlabError, match="devices_per_rank=2 GPU"):
        validate_placement({"policy": "cuda:2"}, ["policy"], cfg, gpus_per_node=4, procs_per_node=2)


def test_single_model_recipe_rejects_devices_per_rank(tmp_path):
    proc = run_cli(["train", "toy", "dist.devices_per_rank=2", "--procs", "1"], tmp_path, check=False)
    assert proc.returncode == 2 and "single model" in proc.stderr and "Traceback" not in proc.stderr


def test_soft_update_tau_edges_and_midpoint():
    torch.manual_seed(0)
    src, tgt = nn.Linear(5, 3), nn.Linear(5, 3)
    before = [p.detach().clone() for p in tgt.parameters()]
    soft_update_(tgt, src, 0.0)
    assert all(torch.equal(a, b) for a, b in zip(tgt.parameters(), before))
    soft_update_(tgt, src, 0.25)
    for t, s, b in zip(tgt.parameters(), src.parameters(), before):
        torch.testing.assert_close(t, 0.75 * b + 0.25 * s, rtol=0, atol=1e-7)
    soft_update_(tgt, src, 1.0)
    assert all(torch.equal(a, b) for a, b in zip(tgt.parameters(), src.parameters()))
    with pytest.raises(DistlabError, match="tau"):
        soft_update_(tgt, src, 1.5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: CPU target from a GPU source")
def test_soft_update_gpu_source_cpu_target_matches_gpu_computation():
    torch.manual_seed(0)
    src = nn.Linear(64, 64).cuda()
    tgt_cpu, tgt_gpu = nn.Linear(64, 64), nn.Linear(64, 64).cuda()
    tgt_gpu.load_state_dict(tgt_cpu.state_dict())
    soft_update_(tgt_cpu, src, 0.1)
    soft_update_(tgt_gpu, src, 0.1)
    for a, b in zip(tgt_cpu.parameters(), tgt_gpu.parameters()):
        torch.testing.assert_close(a, b.cpu(), rtol=0, atol=1e-6)


def test_offloaded_model_gives_the_same_outputs():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(11, 8), nn.Linear(8, 8), nn.LayerNorm(8), nn.Linear(8, 11)).eval()
    x = torch.randint(0, 11, (4, 6))
    with torch.no_grad():
        want = model(x)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    off = offload(model.requires_grad_(False), dev)
    with torch.no_grad():
        got = off(x.to(dev)).cpu()
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert all(p.device.type == "cpu" for p in off.parameters())  # weights went back to the host


def test_compute_device_of_a_plain_model_is_where_its_weights_are():
    model = nn.Linear(3, 3).to(torch.float64)
    assert compute_device(model) == torch.device("cpu")
    assert compute_device(torch.compile(model)) == torch.device("cpu")  # through the compile wrapper


def test_compute_device_of_an_offloaded_model_is_its_compute_device():
    # "meta" stands in for a GPU on a CPU-only machine: the weights stay on the CPU, inputs must go to meta
    model = offload(nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3)).requires_grad_(False), torch.device("meta"))
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    assert compute_device(model) == torch.device("meta")


def test_doctor_estimates_memory_per_device(tmp_path):
    from distlab.doctor import recipe_model_spec
    from distlab.memory.plan import plan_devices

    specs = recipe_model_spec("multitoy", ["placement.reference=offload", "placement.critic=cuda:0"], [])
    n_policy = 16 * 32 + 32 + 32 * 8 + 8
    plan = plan_devices(specs, {0: 10 * 2**30}, host_free=8 * 2**30, procs=1)
    rows = {r["device"]: r for r in plan["per_device"]}
    assert set(rows) == {"cuda:0", "cpu"} and plan["verdict"] == "fits"
    # policy on the GPU holds weights, gradients and AdamW's two moments: 16 bytes per parameter
    assert rows["cuda:0"]["optimizer"] == 8 * (n_policy + (16 * 32 + 32 + 32 + 1))
    # the offloaded reference and the target critic keep their fp32 weights on the host, nothing else
    assert rows["cpu"]["params"] == 4 * (n_policy + 16 * 32 + 32 + 32 + 1) and rows["cpu"]["optimizer"] == 0
    tight = plan_devices(specs, {0: 10_000}, host_free=8 * 2**30, procs=1)
    assert tight["verdict"] == "does_not_fit"
    proc = run_cli(["doctor", "--json", "--no-bandwidth", "--recipe", "multitoy", "placement.reference=offload"],
                   tmp_path, check=False)
    report = json.loads(proc.stdout)
    assert {r["device"] for r in report["memory"]["per_device"]} >= {"cpu"}
