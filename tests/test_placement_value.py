"""``models.<name>.placement`` as one value: every spelling the config takes means the same to every reader (the
checks before launch, the recipes' checks, the doctor's per-device plan, ``place``), and a bad one is refused once,
when the config is resolved, in one line that names the model."""

from __future__ import annotations

import pytest
import torch

from distlab.config import ModelSettings, Placement, PlacementKind, resolve_config
from distlab.errors import DistlabError
from distlab.recipe import ModelSpec, load_recipe
from distlab.runtime.dist import Runtime
from distlab.training.placement import device_for

SPELLINGS = [("device", PlacementKind.device, 0, "device"), ("CPU", PlacementKind.cpu, 0, "cpu"),
             (" offload ", PlacementKind.offload, 0, "offload"), ("cuda", PlacementKind.cuda, 0, "cuda:0"),
             ("CUDA:3", PlacementKind.cuda, 3, "cuda:3"), ("cuda:12", PlacementKind.cuda, 12, "cuda:12")]


@pytest.mark.parametrize("text, kind, index, canonical", SPELLINGS)
def test_each_spelling_is_one_value(text, kind, index, canonical):
    where = Placement.parse(text)
    assert (where.kind, where.index, str(where)) == (kind, index, canonical)
    assert Placement.parse(str(where)) == where and Placement.parse(where) is where
    assert ModelSettings(placement=text).where == where
    assert ModelSpec("m", 10, placement=text).where == where


@pytest.mark.parametrize("text", ["gpu1", "cuda:", "cuda:x", "cuda:-1", "", "device:0", "cpu:1"])
def test_a_bad_placement_is_one_line_naming_the_model(text):
    with pytest.raises(DistlabError, match=r"^models\.critic\.placement=.* is not one of device, cpu, offload, "
                                           r"cuda:N") as info:
        Placement.parse(text, "critic")
    assert "\n" not in str(info.value)


def test_a_bad_placement_is_refused_when_the_config_is_resolved():
    """Every entry point (train, doctor, eval, the Python API) resolves the config: the text is checked there,
    with the model's name, before anything reads it."""
    recipe = load_recipe("multitoy")
    with pytest.raises(DistlabError, match=r"models\.reference\.placement='gpu1' is not one of"):
        resolve_config(recipe, [], ["models.reference.placement=gpu1"])
    with pytest.raises(DistlabError, match=r"models\.critic\.placement='cuda:x'"):
        resolve_config(recipe, [], ["placement.critic=cuda:x"])  # the older spelling of the key too
    cfg = resolve_config(recipe, [], ["models.reference.placement=Offload"])
    assert cfg.models["reference"].placement == "Offload"  # the text is kept as written (names, manifests)
    assert cfg.models["reference"].where == Placement(PlacementKind.offload)


def test_a_doctor_spec_takes_the_same_rule():
    with pytest.raises(DistlabError, match=r"models\.head\.placement='gpu'"):
        ModelSpec("head", 10, placement="gpu")


@pytest.mark.parametrize("text, gpu, expected", [
    ("device", True, ("cuda:0", "cuda:0")), ("device", False, ("cpu", "cpu")), ("cpu", True, ("cpu", "cpu")),
    ("offload", True, ("cpu", "cuda:0")), ("CUDA:1", True, ("cuda:1", "cuda:1")), ("cuda", True, ("cuda:0", "cuda:0")),
])
def test_the_doctor_plans_each_model_where_place_puts_it(text, gpu, expected):
    from distlab.memory.plan import plan_devices

    assert Placement.parse(text).node_devices(gpu) == expected
    free = {0: 80 * 2**30, 1: 80 * 2**30} if gpu else {}
    plan = plan_devices([ModelSpec("m", 1000, placement=text)], free, 64 * 2**30, 1)
    assert sorted(row["device"] for row in plan["per_device"]) == sorted(set(expected))


def test_the_compute_device_of_each_kind():
    cpu = torch.device("cpu")
    rt = Runtime(0, 0, 1, 1, cpu, [cpu], "none", "single", 60.0)
    assert [device_for("m", Placement.parse(t), rt) for t in ("device", "cpu", "offload")] == [cpu, cpu, cpu]
    with pytest.raises(DistlabError, match=r"models\.m\.placement=cuda:1 but this rank runs on the CPU"):
        device_for("m", Placement.parse("CUDA:1"), rt)
    gpus = [torch.device("cuda", i) for i in range(2)]
    rt2 = Runtime(0, 0, 1, 1, gpus[0], gpus, "none", "single", 60.0)
    assert device_for("m", Placement.parse("cuda:1"), rt2) == gpus[1]
    assert device_for("m", Placement.parse("offload"), rt2) == gpus[0]
    with pytest.raises(DistlabError, match="this rank has 2 GPU"):
        device_for("m", Placement.parse("cuda:2"), rt2)
