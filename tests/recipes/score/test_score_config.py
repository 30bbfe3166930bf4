"""Stage schedules, score-specific placement and option checks, the seed's two-GPU map, and the doctor's estimate."""

import pytest

from distlab.config import resolve_config
from distlab.errors import DistlabError
from distlab.memory.plan import plan_devices
from distlab.recipe import load_recipe
from distlab.recipes.score.config import used_models
from distlab.recipes.score.recipe import check, model_spec
from distlab.recipes.score.schedule import StageSchedule, parse_schedule, stage_at
from distlab.training.placement import check_config

TINY = ["model.source=tiny:llama-2l", "model.prompt_mode=text"]
SEED_MAP = ["placement.policy=cuda:0", "placement.critic=cuda:0", "placement.guidance=cuda:1", "placement.value=cuda:1",
            "placement.reference=cpu", "placement.target_critic=cpu", "dist.devices_per_rank=2"]


def cfg_of(*overrides):
    return resolve_config(load_recipe("score"), [], [*TINY, *overrides])


def test_schedule_cycles_and_runs_to_the_end():
    cyc = parse_schedule("I:2,II:3")
    assert [stage_at(cyc, p) for p in range(7)] == ["I", "I", "II", "II", "II", "I", "I"]
    tail = parse_schedule("I:2,II:*")
    assert [stage_at(tail, p) for p in range(6)] == ["I", "I", "II", "II", "II", "II"]
    s = StageSchedule("I:1,II:2")
    for _ in range(4):
        s.advance()
    assert s.state_dict() == {"position": 4, "steps_I": 2, "steps_II": 2} and s.stage == "II"
    t = StageSchedule("I:1,II:2")
    t.load_state_dict(s.state_dict())
    assert t.stage == s.stage and t.steps_in == s.steps_in


@pytest.mark.parametrize("spec, message", [("I:2,III:3", "STAGE I or II"), ("I:*,II:2", "only the last"),
                                           ("I:0", ">= 1"), ("", "empty"), ("I2", "STAGE:STEPS")])
def test_schedule_errors(spec, message):
    with pytest.raises(DistlabError, match=message):
        parse_schedule(spec)


@pytest.mark.parametrize("overrides, message", [
    (["guidance=trained", "placement.guidance=offload"], "guidance.placement=offload streams weights per use"),
    (["models.reference.trainable=true"], "the KL anchor must not move"),
    (["models.target_critic.trainable=true"], "soft updates"),
    (["models.critic.trainable=false"], "models.critic.trainable=false"),
    (["guidance=frozen", "models.guidance.trainable=true"], "set guidance=trained"),
    (["hint_sees_execution=true"], "guidance=none loads none"),
    (["guidance=sometimes"], r"expected one of \[none, frozen, trained\]"),
    (["stage_schedule=II:3,I:x"], "step count"),
    (["num_generations=1"], "2 or more"),
    (["prompts_per_step=3"], "does not split over 2 ranks"),
])
def test_score_specific_errors(overrides, message):
    with pytest.raises(DistlabError, match=message):
        check(cfg_of(*overrides), 2)


def test_guidance_is_never_offloaded_but_the_reference_may_be():
    with pytest.raises(DistlabError, match="once per generated hint token"):  # it generates: offload would crawl
        check(cfg_of("guidance=frozen", "placement.guidance=offload"), 1)
    check(cfg_of("guidance=trained", "placement.guidance=cpu", "placement.reference=offload"), 1)
    check(cfg_of("guidance=none", "placement.guidance=offload"), 1)  # unused: only a warning


def test_unused_models_are_not_loaded():
    assert used_models(cfg_of("guidance=none", "advantage=mc", "beta1=0", "beta2=0")) == ["policy"]
    assert used_models(cfg_of("beta1=0")) == ["policy"]  # beta2 defaults to 10 x beta1
    assert used_models(cfg_of("beta1=0", "beta2=0.1")) == ["policy", "reference"]
    assert used_models(cfg_of("guidance=frozen", "advantage=critic")) == [
        "policy", "reference", "guidance", "critic", "target_critic", "value"]
    assert [s.name for s in model_spec(cfg_of("beta1=0", "beta2=0"))] == ["policy"]


def test_seed_placement_map_is_expressible_and_checked():
    cfg = cfg_of(*SEED_MAP, "dist.device=cuda", "guidance=trained", "advantage=critic")
    check_config(cfg, procs_per_node=1, gpus_per_node=2)  # one rank driving two GPUs
    check(cfg, 1)
    with pytest.raises(DistlabError, match="need 4 GPUs but 2 are visible"):
        check_config(cfg, procs_per_node=2, gpus_per_node=2)
    with pytest.raises(DistlabError, match=r"models.guidance.placement=cuda:1 but each rank has dist.devices_per_rank=1"):
        check_config(cfg_of(*SEED_MAP[:-1], "dist.device=cuda"), procs_per_node=1, gpus_per_node=2)
    with pytest.raises(DistlabError, match="this run has no GPU"):
        check_config(cfg_of(*SEED_MAP, "dist.device=cpu"), procs_per_node=1, gpus_per_node=0)


def test_doctor_estimates_memory_per_device_for_the_seed_map():
    specs = model_spec(cfg_of(*SEED_MAP, "guidance=trained", "advantage=critic"))
    by_name = {s.name: s for s in specs}
    assert set(by_name) == {"policy", "reference", "guidance", "critic", "value", "target_critic"}
    assert by_name["guidance"].trainable > 0 and by_name["target_critic"].trainable == 0
    assert by_name["target_critic"].params == 2 * by_name["critic"].params
    plan = plan_devices(specs, {0: 80 * 2**30, 1: 80 * 2**30}, host_free=64 * 2**30, procs=1)
    rows = {r["device"]: r for r in plan["per_device"]}
    assert set(rows) == {"cuda:0", "cuda:1", "cpu"} and plan["verdict"] == "fits"
    assert set(rows["cuda:0"]["models"]) == {"policy", "critic"}
    assert set(rows["cuda:1"]["models"]) == {"guidance", "value"}
    assert set(rows["cpu"]["models"]) == {"reference", "target_critic"}
    assert rows["cpu"]["optimizer"] == 0 and rows["cuda:1"]["optimizer"] > 0
