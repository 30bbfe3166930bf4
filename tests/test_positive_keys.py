"""Keys that count or scale something refuse 0: the core names only its own, each recipe names its own."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

import pytest

from distlab.config import POSITIVE_KEYS, BaseConfig, check_values, resolve_config
from distlab.errors import DistlabError
from distlab.recipe import Recipe, load_recipe


def _numeric_leaves(obj, prefix: str = ""):
    """``(dotted key, leaf name, default)`` for every int/float leaf of a config dataclass instance."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from _numeric_leaves(value, prefix + f.name + ".")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield prefix + f.name, f.name, value


def test_the_core_names_only_its_own_keys():
    core = {leaf for _, leaf, _ in _numeric_leaves(BaseConfig())}
    assert POSITIVE_KEYS <= core, sorted(POSITIVE_KEYS - core)


@dataclass
class _WidgetConfig(BaseConfig):
    widgets: int = 3
    ratio: float = 0.5


def _recipe(keys: frozenset[str]) -> Recipe:
    return Recipe(name="widgets", config=_WidgetConfig, train=lambda cfg, s: {}, positive_keys=keys)


def test_a_recipes_own_keys_refuse_zero_and_others_do_not():
    cfg = _WidgetConfig(widgets=0, ratio=0.0)
    check_values(_recipe(frozenset()), cfg)  # nobody declared widgets: 0 passes
    with pytest.raises(DistlabError, match=r"widgets=0 is invalid: it must be greater than 0 \(default widgets=3\)"):
        check_values(_recipe(frozenset({"widgets"})), cfg)
    with pytest.raises(DistlabError, match="ckpt.keep_last=0"):  # the core's keys hold for every recipe
        check_values(_recipe(frozenset()), dataclasses.replace(_WidgetConfig(), ckpt=dataclasses.replace(
            BaseConfig().ckpt, keep_last=0)))


OWN = {"hrm": {"epochs", "global_batch_size", "hidden_size", "test_size"},
       "ppo": {"total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs"},
       "toy": {"global_batch_size", "num_examples", "seq_len", "vocab", "d_model", "n_layers", "n_heads"},
       "multitoy": {"global_batch_size", "num_examples", "dim", "actions", "critic_lr"}}


@pytest.mark.parametrize("name", sorted(OWN))
def test_each_recipe_refuses_zero_for_its_keys(name):
    recipe = load_recipe(name)
    assert OWN[name] <= recipe.positive_keys
    keys = [(k, d) for k, leaf, d in _numeric_leaves(recipe.config()) if leaf in recipe.positive_keys and d > 0]
    assert {k.rsplit(".", 1)[-1] for k, _ in keys} >= OWN[name] | {"lr"}
    for key, default in keys:
        with pytest.raises(DistlabError, match=re.escape(key) + r"=0(\.0)? is invalid: it must be greater than 0"):
            resolve_config(recipe, [], [f"{key}=0"])
