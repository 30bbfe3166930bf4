"""``run.smoke=true`` / ``distlab train --smoke``: every recipe's own settings shrink steps and evaluation, the change
is said in one log line, and a smoke run of the toy recipe finishes in seconds under its own run name."""

import dataclasses
import time

import pytest

from clitools import run_cli, summary
from distlab.config import finalize_config, resolve_config, smoke_changes, smoke_line
from distlab.errors import DistlabError
from distlab.recipe import load_recipe, recipe_names

# per recipe: the length it trains at most under smoke, and the evaluation keys with their largest smoke value
# (PPO and multitoy have no evaluation phase)
SMALL = {
    "toy": (3, {"eval_examples": 64}),
    "multitoy": (3, {}),
    "hrm": (2, {"data.eval_limit": 32, "data.interim_eval_limit": 32, "eval.samples": 1}),
    "ppo": (256, {}),
    "grpo": (2, {"task.eval_size": 8, "evaluation.samples": 1, "evaluation.eval_interval_steps": 0}),
    "score": (2, {"task.eval_size": 8, "evaluation.samples": 1, "evaluation.eval_interval_steps": 0}),
}


def _get(cfg, key):
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def test_every_installed_recipe_declares_smoke_settings():
    assert set(recipe_names()) <= set(SMALL), "a new recipe needs its smoke settings (Recipe.smoke) and a row here"
    for name in recipe_names():
        assert load_recipe(name).smoke, name


@pytest.mark.parametrize("name", sorted(SMALL))
def test_smoke_shrinks_steps_and_evaluation(name):
    recipe = load_recipe(name)
    full = resolve_config(recipe, [], [])
    smoke = resolve_config(recipe, [], ["run.smoke=true"])
    most, evaluation = SMALL[name]
    steps = _get(smoke, recipe.steps_key)
    assert 0 < steps <= most and (steps < _get(full, recipe.steps_key) or _get(full, recipe.steps_key) == 0)
    for key, bound in evaluation.items():
        value = _get(smoke, key)
        assert value <= bound, (key, value)
        # an evaluation size of 0 means "all of it": the smoke value must be a positive bound, never 0
        if key.endswith(("eval_size", "eval_limit", "eval_examples", "samples")):
            assert value > 0, key
    assert smoke.log.every == 1
    line = smoke_line(recipe, [], ["run.smoke=true"])
    assert line.startswith("run.smoke:") and "\n" not in line and f"{recipe.steps_key} " in line
    assert smoke_line(recipe, [], []) is None  # off: no line, and no change
    assert _get(full, recipe.steps_key) == _get(resolve_config(recipe, [], ["run.smoke=false"]), recipe.steps_key)


def test_a_smaller_value_of_the_user_stays_and_a_larger_one_shrinks():
    toy = load_recipe("toy")
    assert resolve_config(toy, [], ["run.smoke=true", "steps=1"]).steps == 1
    assert resolve_config(toy, [], ["run.smoke=true", "steps=500", "eval_examples=10000"]).eval_examples == 64
    changed = {key for key, _, _ in smoke_changes(toy, resolve_config(toy, [], ["steps=1"]))}
    assert "steps" not in changed and "eval_examples" in changed


def test_a_smoke_run_is_named_apart_from_the_full_run():
    toy = load_recipe("toy")
    full, _ = finalize_config(toy, resolve_config(toy, [], []), 1)
    smoke, _ = finalize_config(toy, resolve_config(toy, [], ["run.smoke=true"]), 1)
    assert full.run.name != smoke.run.name  # a smoke run never resumes into (or overwrites) the real one


def test_a_smoke_setting_that_is_not_a_key_is_named():
    broken = dataclasses.replace(load_recipe("toy"), smoke={"stepz": 2})
    with pytest.raises(DistlabError, match="smoke setting 'stepz' is not a config key"):
        resolve_config(broken, [], ["run.smoke=true"])


def test_train_smoke_flag_runs_the_toy_recipe_end_to_end_quickly(tmp_path):
    shown = run_cli(["train", "toy", "--smoke", "--show-config"], tmp_path)
    assert "steps: 3" in shown.stdout and "smoke: true" in shown.stdout
    started = time.monotonic()
    proc = run_cli(["train", "toy", "--smoke", "log.progress=false"], tmp_path, timeout=120)
    took = time.monotonic() - started
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1
    done = summary(runs[0])
    assert done["status"] == "completed" and done["step"] == 3
    assert "eval" in done  # the evaluation ran, on the smoke set
    lines = [ln for ln in proc.stderr.splitlines() if "run.smoke:" in ln]
    assert len(lines) == 1 and "steps 40->3" in lines[0] and "eval_examples 250->64" in lines[0]
    assert took < 90, took  # a full toy run is 40 steps on 2048 examples; this is a few seconds of work
