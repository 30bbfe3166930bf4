"""The 44.5 GiB SCoRe preset is the layout measured on the H200 (docs/benchmarks.md), and the doctor's memory
model puts it under the seed's card while the same map without its moves does not fit."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")

from distlab.config import resolve_config  # noqa: E402
from distlab.memory.estimate import recipe_specs  # noqa: E402
from distlab.memory.plan import plan_devices  # noqa: E402
from distlab.recipe import load_recipe  # noqa: E402

CARD = 44.5 * 2**30


def _gpu_gib(*overrides: str) -> float:
    recipe = load_recipe("score")
    cfg = resolve_config(recipe, ["budget-3b-44g"], list(overrides))
    plan = plan_devices(recipe_specs(recipe, cfg), {0: int(CARD)}, 128 * 2**30, 1)
    return next(r["total"] for r in plan["per_device"] if r["device"] == "cuda:0") / 2**30


def test_the_preset_is_the_measured_layout():
    cfg = resolve_config(load_recipe("score"), ["budget-3b-44g"], [])
    m = cfg.models
    assert cfg.model.source == "random:llama-3.2-3b"
    assert (m["reference"].placement, m["guidance"].placement, m["target_critic"].placement) == ("offload", "cpu", "cpu")
    assert str(cfg.optim.state_dtype.value if hasattr(cfg.optim.state_dtype, "value") else cfg.optim.state_dtype) == "int8"


def test_the_doctor_fits_it_under_the_card_and_not_without_its_moves():
    from distlab.memory.plan import SAFETY_FRACTION

    budget = _gpu_gib()
    assert budget < 44.5 * SAFETY_FRACTION  # the doctor's "fits" on the seed's card
    assert abs(budget / 38.32 - 1) < 0.15  # the preset's measured peak (H200, 2026-11-26): 38.32 GiB
    assert _gpu_gib("models.guidance.placement=device") > budget + 5  # the 3B guidance model's bf16 weights
    assert _gpu_gib("models.guidance.placement=device", "models.reference.placement=device",
                    "models.target_critic.placement=device") > 44.5
