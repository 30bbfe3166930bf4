import pytest

from distlab.config import apply_scaling, compose, default_run_name, schema_keys, to_object
from distlab.errors import DistlabError
from distlab.recipes.toy import ToyConfig


def test_overrides_are_typed_and_nested():
    cfg = to_object(compose(ToyConfig, [], ["lr=1e-4", "dist.grad_accum=2", "run.name=x", "log.wandb=true"]))
    assert cfg.lr == pytest.approx(1e-4) and cfg.dist.grad_accum == 2 and cfg.run.name == "x" and cfg.log.wandb


def test_unknown_key_names_near_matches():
    with pytest.raises(DistlabError) as e:
        compose(ToyConfig, [], ["dist.grad_acum=2"])
    msg = str(e.value)
    assert "dist.grad_acum" in msg and "dist.grad_accum" in msg and "\n" not in msg


def test_wrong_type_is_one_line():
    with pytest.raises(DistlabError) as e:
        compose(ToyConfig, [], ["steps=many"])
    assert "steps=many" in str(e.value) and "\n" not in str(e.value)


def test_bad_enum_value():
    with pytest.raises(DistlabError, match="dist.wrap=zero3"):
        compose(ToyConfig, [], ["dist.wrap=zero3"])


def test_not_key_value():
    with pytest.raises(DistlabError, match="key=value"):
        compose(ToyConfig, [], ["lr"])


def test_preset_file_then_override(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("steps: 7\nlr: 0.5\ndist:\n  precision: bf16\n")
    cfg = to_object(compose(ToyConfig, [p], ["lr=0.25"]))
    assert cfg.steps == 7 and cfg.lr == 0.25 and cfg.dist.precision.value == "bf16"


def test_preset_with_unknown_key(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("stepz: 7\n")
    with pytest.raises(DistlabError, match="steps"):
        compose(ToyConfig, [p], [])


def test_scaling_rules_applied_once_from_base():
    cfg = to_object(compose(ToyConfig, [], ["scale.batch=linear", "scale.lr=sqrt", "global_batch_size=32",
                                            "lr=3e-4"]))
    rec = apply_scaling(cfg, 8, ("global_batch_size",), ("lr",))
    assert cfg.global_batch_size == 256
    assert cfg.lr == pytest.approx(3e-4 * 8 ** 0.5)  # the seed's 3e-4 -> 8.5e-4 at 8 GPUs
    assert {r["key"]: r["factor"] for r in rec} == {"global_batch_size": 8, "lr": pytest.approx(8 ** 0.5)}


def test_no_scaling_by_default():
    cfg = to_object(compose(ToyConfig, [], []))
    assert apply_scaling(cfg, 4, ("global_batch_size",), ("lr",)) == [] and cfg.global_batch_size == 32


def test_run_name_ignores_where_it_runs_but_not_what():
    a = to_object(compose(ToyConfig, [], ["dist.device=cpu", "log.every=3"]))
    b = to_object(compose(ToyConfig, [], []))
    c = to_object(compose(ToyConfig, [], ["lr=0.1"]))
    d = to_object(compose(ToyConfig, [], ["run.seed=1"]))
    assert default_run_name("toy", a) == default_run_name("toy", b)
    assert len({default_run_name("toy", x) for x in (b, c, d)}) == 3


def test_schema_keys_lists_nested():
    keys = schema_keys(ToyConfig)
    assert "dist.timeout_s" in keys and "scale.lr" in keys and "lr" in keys


def test_switches_take_yes_no_words_only():
    """OmegaConf alone would read log.memory_snapshot=2 (or dist.compile=0) as a bool without a word."""
    for word, value in (("true", True), ("False", False), ("yes", True), ("off", False)):
        assert to_object(compose(ToyConfig, overrides=[f"dist.compile={word}"])).dist.compile is value
    for text in ("2", "0", "1", "maybe", ""):
        with pytest.raises(DistlabError, match=f"dist.compile={text} is not a boolean"):
            compose(ToyConfig, overrides=[f"dist.compile={text}"])


def test_old_spellings_in_files_and_overrides_map_to_current_keys(tmp_path):
    """A GRPO config written before placement and accumulation moved keeps working, in a file or on the line."""
    from distlab.config import resolve_config
    from distlab.recipe import load_recipe

    old = tmp_path / "old.yaml"
    old.write_text("gradient_accumulation_steps: 8\nplacement:\n  reference: cpu\n")
    cfg = resolve_config(load_recipe("grpo"), [str(old)], [])
    assert cfg.dist.grad_accum == 8 and cfg.models["reference"].placement == "cpu"
    cfg = resolve_config(load_recipe("grpo"), [], ["gradient_accumulation_steps=4", "placement.policy=cpu"])
    assert cfg.dist.grad_accum == 4 and cfg.models["policy"].placement == "cpu"
    with pytest.raises(DistlabError, match="this recipe has no model 'banana'|unknown config key"):
        from distlab.training.placement import check_config

        check_config(resolve_config(load_recipe("grpo"), [], ["placement.banana=cpu"]), 1, 0)


def test_a_text_setting_keeps_the_word_as_typed():
    """YAML reads off/yes/123 as False/True/123: a run named 'off' must not become a run named 'False'."""
    for word in ("off", "yes", "123", "no"):
        assert to_object(compose(ToyConfig, [], [f"run.name={word}"])).run.name == word
    assert to_object(compose(ToyConfig, [], ["run.name=null"])).run.name in (None, "")
    with pytest.raises(DistlabError, match="lr=off"):
        compose(ToyConfig, [], ["lr=off"])  # a number is still parsed as one
    assert to_object(compose(ToyConfig, [], ["dist.compile=true"])).dist.compile is True


def test_run_name_survives_a_new_key_with_a_default_and_ignores_the_layout():
    """A release that adds a setting (with its default) must not rename existing runs: the same command resumes."""
    import dataclasses

    @dataclasses.dataclass
    class Grown(ToyConfig):
        new_knob: int = 7  # a key added later, at its default

    old = to_object(compose(ToyConfig, [], ["lr=0.1"]))
    new = to_object(compose(Grown, [], ["lr=0.1"]))
    assert default_run_name("toy", old) == default_run_name("toy", new)
    assert default_run_name("toy", new) != default_run_name("toy", to_object(compose(Grown, [], ["lr=0.1",
                                                                                               "new_knob=8"])))
    # a recipe's layout keys are how its ranks share the work: another layout continues the same run
    assert default_run_name("toy", old, ("lr",)) == default_run_name("toy", to_object(compose(ToyConfig, [], [])),
                                                                     ("lr",))
