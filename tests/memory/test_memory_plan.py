"""Memory arithmetic against hand-computed numbers, and the scaling table read from a file."""

from __future__ import annotations

import json
import math

import pytest

from distlab.errors import DistlabError
from distlab.memory.plan import ModelSpec, estimate_memory, plan_memory, speedup_estimates

GIB = 1024**3


def test_adam_fp32_is_16_bytes_per_param_plus_activations() -> None:
    spec = ModelSpec("hrm", 27_000_000, activation_bytes_per_example=3_000_000, batch_per_device=32)
    ddp = estimate_memory(spec, strategy="ddp", world_size=4)
    assert (ddp.params, ddp.grads, ddp.optimizer) == (108e6, 108e6, 216e6)
    assert ddp.total == 27_000_000 * 16 + 3_000_000 * 32


def test_fsdp_divides_static_state_by_world_size_but_not_activations() -> None:
    spec = ModelSpec("m", 30_000_000, activation_bytes_per_example=1_000, batch_per_device=8)
    ddp = estimate_memory(spec, strategy="ddp", world_size=3)
    fsdp = estimate_memory(spec, strategy="fsdp", world_size=3)
    assert fsdp.static == ddp.static / 3 == 30_000_000 * 16 / 3
    assert fsdp.activations == ddp.activations == 8_000


def test_frozen_params_in_bf16_and_trainable_ones_in_fp32() -> None:
    # 10M params, 4M trainable (LoRA), dtype bf16: 2*6M frozen + 4*4M trained weights, 4*4M grads, 8*4M Adam;
    # no master copy exists (the trained weights are the fp32 ones), so none is counted
    spec = ModelSpec("lora", 10_000_000, trainable_params=4_000_000, param_dtype_bytes=2)
    b = estimate_memory(spec)
    assert (b.params, b.grads, b.optimizer) == (12e6 + 16e6, 16e6, 32e6)
    assert b.total == 12e6 + 16e6 + 16e6 + 32e6
    sgd = ModelSpec("s", 1_000, optimizer="sgd")
    assert estimate_memory(sgd).total == 1_000 * (4 + 4 + 4)


def test_plan_recommends_smaller_batch_with_accumulation() -> None:
    # static 16 MB; 10 MB per example; 100 MB capacity -> usable 90 MB -> batch 7, accumulation ceil(32/7)=5
    spec = ModelSpec("m", 1_000_000, activation_bytes_per_example=10_000_000, batch_per_device=32)
    plan = plan_memory(spec, capacity_bytes=100_000_000, world_size=2, device="test")
    assert plan["verdict"] == "reduce_batch"
    assert "to 7" in plan["recommendation"] and "5 gradient-accumulation" in plan["recommendation"]


def test_plan_names_the_largest_term_and_the_key_that_shrinks_it() -> None:
    acts = plan_memory(ModelSpec("m", 1_000_000, activation_bytes_per_example=10_000_000, batch_per_device=32),
                       capacity_bytes=100_000_000, world_size=2, device="test")["largest"]
    assert acts == {"term": "activations", "bytes": 320_000_000,
                    "shrink_with": "dist.activation_checkpointing=blocks, or dist.grad_accum=2 (half the examples "
                                   "per pass)"}
    opt = plan_memory(ModelSpec("m", 10_000_000, activation_bytes_per_example=1_000, batch_per_device=1),
                      capacity_bytes=10 * GIB, world_size=4, device="test")["largest"]
    assert opt["term"] == "optimizer" and opt["bytes"] == 80_000_000 and "dist.wrap=fsdp" in opt["shrink_with"]


def test_plan_recommends_fsdp_when_only_sharded_state_fits() -> None:
    spec = ModelSpec("m", 10_000_000, activation_bytes_per_example=1_000, batch_per_device=1)  # 160 MB static
    plan = plan_memory(spec, capacity_bytes=100_000_000, world_size=4, device="test")
    assert plan["verdict"] == "use_fsdp"
    assert plan["fsdp"]["total"] == 40_000_000 + 1_000
    fits = plan_memory(spec, capacity_bytes=10 * GIB, world_size=4, device="test")
    assert fits["verdict"] == "fits"


def test_plan_says_how_many_devices_when_nothing_fits() -> None:
    spec = ModelSpec("m", 10_000_000, activation_bytes_per_example=1_000_000)  # 160 MB static
    plan = plan_memory(spec, capacity_bytes=50_000_000, world_size=2, device="test")
    assert plan["verdict"] == "does_not_fit"
    need = math.ceil(160_000_000 / (45_000_000 - 1_000_000))
    assert f"at least {need} devices" in plan["recommendation"]


def test_bad_model_specs_raise_user_errors() -> None:
    with pytest.raises(DistlabError, match="did you mean 'adam'"):
        ModelSpec("m", 10, optimizer="adma")
    with pytest.raises(DistlabError, match="params must be > 0"):
        ModelSpec("m", 0)


def _write_scaling(path, rows) -> None:
    path.write_text(json.dumps({"recipe": "ppo", "device": "H100", "results": rows}))


def test_speedup_table_from_scaling_file(tmp_path) -> None:
    f = tmp_path / "scaling.json"
    _write_scaling(f, [{"gpus": 4, "throughput": 340.0, "wall": 1}, {"gpus": 1, "throughput": 100.0},
                       {"gpus": 2, "throughput": 180.0}])
    sp = speedup_estimates(f)
    assert [r["gpus"] for r in sp["measured"]] == [1, 2, 4]
    assert [r["speedup"] for r in sp["measured"]] == pytest.approx([1.0, 1.8, 3.4])
    assert [r["efficiency"] for r in sp["measured"]] == pytest.approx([1.0, 0.9, 0.85])
    assert all(r["kind"] == "measured" for r in sp["measured"])
    # Amdahl serial fraction per point: (2/1.8-1)/1 and (4/3.4-1)/3, averaged
    s = ((2 / 1.8 - 1) + (4 / 3.4 - 1) / 3) / 2
    assert sp["serial_fraction"] == pytest.approx(s)
    assert [r["gpus"] for r in sp["estimates"]] == [8]
    assert sp["estimates"][0]["speedup"] == pytest.approx(8 / (1 + s * 7))
    assert all(r["kind"] == "estimate" for r in sp["estimates"]) and "not measurements" in sp["note"]


def test_no_scaling_file_means_no_table(tmp_path) -> None:
    sp = speedup_estimates(None)
    assert sp["measured"] == [] and sp["estimates"] == [] and "no scaling measurement" in sp["note"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"results": [{"gpus": 1}]}))
    with pytest.raises(DistlabError, match="malformed"):
        speedup_estimates(bad)
    with pytest.raises(DistlabError, match="does not exist"):
        speedup_estimates(tmp_path / "missing.json")
