"""The arms suite (``benchmarks/suites/score_arms.yaml``): every arm x {intrinsic, extrinsic} plus the two controls,
at equal compute, each config valid at its CPU sizes and equal to its ``arm-<name>`` preset; one arm and the
untrained control run end to end through the real CLI at the suite's smoke size (two steps, seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")

from score_cli import run_cli, summary  # noqa: E402

from distlab.config import resolve_config  # noqa: E402
from distlab.recipe import load_recipe  # noqa: E402
from distlab.recipes.score.recipe import PRESETS  # noqa: E402
from distlab.suite.spec import format_value, load_suite  # noqa: E402

SUITE = Path(__file__).resolve().parents[3] / "benchmarks" / "suites" / "score_arms.yaml"
ARMS = ("score", "cocos", "bandit", "selective")
CONTROLS = ("base", "shuffled")
COMPUTE = ("steps", "prompts_per_step", "num_generations", "sampling.max_completion_length", "micro_batch_size")


def _words(overrides: dict) -> list[str]:
    return [f"{k}={format_value(v)}" for k, v in overrides.items()]


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def test_every_arm_with_and_without_execution_feedback_and_both_controls():
    suite = load_suite(SUITE)
    names = [f"{a}{ext}" for a in (*ARMS, *CONTROLS) for ext in ("", "_ext")]
    assert sorted(suite.experiments) == sorted(names) and suite.baseline == "base"
    for scale in (None, "demo-cpu", "smoke"):
        for a in (*ARMS, *CONTROLS):
            plain, ext = suite.resolved(a, scale), suite.resolved(f"{a}_ext", scale)
            assert plain["policy_sees_execution"] is False and ext["policy_sees_execution"] is True
            assert {k: v for k, v in plain.items() if k != "policy_sees_execution"} == \
                   {k: v for k, v in ext.items() if k != "policy_sees_execution"}, (a, scale)


@pytest.mark.parametrize("scale", [None, "demo-cpu", "smoke"])
def test_trained_arms_spend_equal_compute(scale):
    suite = load_suite(SUITE)
    trained = [n for n in suite.experiments if not n.startswith("base")]
    sizes = {tuple(suite.resolved(n, scale)[k] for k in COMPUTE) for n in trained}
    assert len(sizes) == 1, sizes
    assert all(suite.resolved(n, scale)["steps"] == 0 for n in ("base", "base_ext"))


def test_the_suite_arms_are_the_presets():
    """What a user runs with ``--config demo-cpu --config arm-X`` is what the suite runs at its demo-cpu size."""
    suite = load_suite(SUITE)
    for arm in (*ARMS, *CONTROLS):
        preset = _flat(yaml.safe_load((PRESETS / f"arm-{arm}.yaml").read_text()))
        run = suite.resolved(arm, "demo-cpu")
        assert {k: run[k] for k in preset} == preset, arm


@pytest.mark.parametrize("scale", ["demo-cpu", "smoke"])
def test_every_cpu_config_is_valid(scale):
    recipe, suite = load_recipe("score"), load_suite(SUITE)
    for name in suite.experiments:
        cfg = resolve_config(recipe, [], _words(suite.resolved(name, scale)))
        recipe.validate(cfg, 1)
        assert cfg.model.source == "tiny:llama-2l"


def test_the_published_size_is_qwen_coder_on_mbpp():
    cfg = resolve_config(load_recipe("score"), [], _words(load_suite(SUITE).resolved("bandit_ext")))
    assert "qwen2.5-coder-0.5b" in cfg.model.source and cfg.model.prompt_mode == "chat"
    assert (cfg.task.train, cfg.task.eval, cfg.task.eval_split, cfg.task.eval_size) == ("mbpp", "mbpp", "test", 500)
    assert cfg.arm == "bandit_t2" and cfg.policy_sees_execution and cfg.evaluation.before


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("arms")
    suite = load_suite(SUITE)
    for name in ("selective_ext", "base"):
        run_cli(["train", "score", *_words(suite.resolved(name, "smoke")), f"run.name={name}", "--procs", "1"], d)
    return d / "runs"


def test_selective_arm_with_feedback_runs_end_to_end(smoke_runs):
    run = smoke_runs / "selective_ext"
    s = summary(run)
    assert s["status"] == "completed" and s["step"] == 2 and s["feedback"] == "extrinsic"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["split"] == "train"]
    assert [r["step"] for r in train] == [1, 2]
    assert all(r["extrinsic"] == 1.0 and 0.0 <= r["keep_rate"] <= 1.0 and r["len_t1"] > 0 for r in train)
    assert {"acc_t1", "acc_t2", "delta_t1_t2", "keep_rate"} <= set(s["eval"])


def test_untrained_control_only_evaluates_the_starting_model(smoke_runs):
    s = summary(smoke_runs / "base")
    assert s["status"] == "completed" and s["step"] == 0
    rows = [json.loads(x) for x in (smoke_runs / "base" / "metrics.jsonl").read_text().splitlines()]
    assert not [r for r in rows if r["split"] == "train"]  # no RL step
    assert {"acc_t1", "acc_t2", "delta_t1_t2"} <= set(s["eval"])
