"""SCoRe's training rollouts decode on one fixed cache shape per model (issue 29: a recompilation per new shape
cost 35-39 s on a GPU), the policy's turn 1 and turn 2 sharing the shape sized for the longer turn-2 prompt."""

import functools

import pytest

pytest.importorskip("transformers")

from score_cli import TINY  # noqa: E402


def _setting(args, key):
    return next(a.split("=", 1)[1] for a in args if a.startswith(key + "="))


def test_turn1_turn2_and_guidance_calls_keep_one_cache_shape_each(monkeypatch):
    from distlab.launch.launcher import preflight
    from distlab.recipes.lm.rollout import generate as gen
    from distlab.recipes.lm.envs import rollout as env_rollout
    from distlab.recipes.lm.models.source import load_causal_lm
    from distlab.recipes.lm.rewards.scorer import RewardScorer
    from distlab.recipes.lm.tasks.select import task_split
    from distlab.recipes.score import rollout
    from distlab.recipes.score.train import cache_shapes

    overrides = [a for a in TINY if not a.startswith(("sft_", "evaluation."))]
    overrides += ["guidance=frozen", "hint_sees_execution=true", "task.train_size=24"]
    _, cfg = preflight("score", [], overrides, 1)
    tasks, _, few_shot = task_split(cfg.task)
    policy, tok = load_causal_lm(cfg.model.source)
    guide, gtok = load_causal_lm(cfg.model.source)

    def eager_step(m):  # the StaticCache path on the CPU: the step torch.compile would capture, run eagerly
        key = gen.cache_keyword(m)
        return lambda t, pos, mask, cache: m(input_ids=t, attention_mask=mask, position_ids=pos, use_cache=True,
                                             **{key: cache}).logits[:, -1]

    monkeypatch.setattr(gen, "_compiled_decode_step", eager_step)
    seen = {"policy": [], "guidance": []}

    def recorded(fn):
        @functools.wraps(fn)
        def call(model, *args, **kwargs):
            out = fn(model, *args, compile=True, **kwargs)
            seen["policy" if model is policy else "guidance"].append(model.__dict__["_distlab_static_cache"][0][:2])
            return out
        return call

    monkeypatch.setattr(rollout, "generate", recorded(gen.generate))  # the guidance's hints
    monkeypatch.setattr(env_rollout, "generate", recorded(gen.generate))  # the policy's turns (the envs' driver)
    players = rollout.Players(policy, tok, "text", guide, gtok, "text")
    players.shapes = cache_shapes(cfg, 1, players_as_models(players), tasks, few_shot)
    g = cfg.num_generations
    short = sorted(tasks, key=lambda t: len(t.prompt))[:cfg.prompts_per_step]
    long = sorted(tasks, key=lambda t: len(t.prompt))[-cfg.prompts_per_step:]
    scorer = RewardScorer(cfg.sandbox, "text")
    try:
        for step, batch in enumerate((short, long, short)):
            episodes = rollout.play(cfg, players, batch, few_shot, scorer, n=g, temperature=1.0,
                                    hint_temperature=1.0, seed=step, no_hint=False, fixed=True)
            assert len(episodes) == len(batch) * g and all(ep.y2 is not None for ep in episodes)
    finally:
        scorer.close()
        for m in (policy, guide):
            m.__dict__.pop("_distlab_static_cache", None)
    assert len(seen["policy"]) == 6 and len(set(seen["policy"])) == 1, seen["policy"]  # 3 steps x 2 turns
    assert len(seen["guidance"]) == 3 and len(set(seen["guidance"])) == 1, seen["guidance"]
    rows, length = seen["policy"][0]
    assert rows == cfg.prompts_per_step * g and length >= players.shapes.policy_prompt


def players_as_models(players):
    from types import SimpleNamespace

    return SimpleNamespace(tok=players.tok, gtok=players.gtok, guidance=players.guidance)
