"""A rollout says how far its decoding is: ``generate`` reports every decode step (both backends), and GRPO's
rollout turns that into the progress of a phase named ``rollout``, counted in tokens per completion over its calls."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")

import distlab.recipes.grpo.train as grpo_train  # noqa: E402
from distlab.config import resolve_config  # noqa: E402
from distlab.recipe import load_recipe  # noqa: E402
from distlab.recipes.lm.config import SamplingConfig  # noqa: E402
from distlab.recipes.lm.models.placed import SamplingCopy  # noqa: E402
from distlab.recipes.lm.models.source import load_causal_lm  # noqa: E402
from distlab.recipes.lm.rewards.scorer import RewardScorer  # noqa: E402
from distlab.recipes.lm.rollout.generate import generate  # noqa: E402
from distlab.recipes.lm.tasks.prompts import prompt_text  # noqa: E402
from distlab.recipes.lm.tasks.select import task_split  # noqa: E402
from distlab.run.logs import Progress  # noqa: E402
from distlab.training.placement import DTYPES  # noqa: E402


@pytest.mark.parametrize("backend", ["static", "hf"])
def test_generate_reports_each_decode_step(backend):
    model, tok = load_causal_lm("tiny:llama-2l", seed=0)
    steps: list[int] = []
    out = generate(model, tok, ["def f(x):", "x = 1"],
                   SamplingConfig(max_completion_length=7, temperature=0.0, backend=backend), on_step=steps.append)
    longest = max(len(c.token_ids) for c in out)
    assert steps[:longest] == list(range(1, longest + 1)) and steps[-1] <= 7


def test_a_rollout_shows_its_decode_steps_rate_and_eta(capsys):
    cfg = resolve_config(load_recipe("grpo"), [], [
        "model.source=tiny:llama-2l", "model.prompt_mode=text", "num_generations=2", "sampling.chunk_prompts=2",
        "sampling.max_completion_length=6", "task.train_size=8", "task.families=add_const", "dist.device=cpu"])
    tasks, _, few_shot = task_split(cfg.task)
    policy, tok = load_causal_lm(cfg.model.source, seed=0)
    scorer = RewardScorer(cfg.sandbox, cfg.model.prompt_mode)
    rewards = grpo_train.reward_functions(cfg, scorer)
    opened: list[Progress] = []

    def phase(label: str, total: int, unit: str) -> Progress:  # as Session.phase, printing every update at once
        opened.append(Progress(total, unit=unit, label=label, every_s=0.0, transient=True))
        return opened[-1]

    parts = grpo_train.Parts(policy, SamplingCopy(policy, DTYPES[cfg.models["policy"].dtype]), None, None, tok,
                             few_shot, scorer, rewards, phase=phase)
    local = tasks[:4]
    try:
        comps, _ = grpo_train.rollout(cfg, parts, local, [prompt_text(t, tok, "text", few_shot) for t in local], 0)
    finally:
        scorer.close()
    assert len(comps) == 8 and len(opened) == 1 and opened[0].total == 12  # 2 calls x 6 tokens
    lines = [x for x in capsys.readouterr().err.splitlines() if "rollout: token" in x]
    assert lines[0].split("  ")[0].endswith("token 1/12") and lines[-1].split("  ")[0].endswith("token 12/12")
    assert all("token/s" in x or "s/token" in x for x in lines) and "eta " in lines[0]
