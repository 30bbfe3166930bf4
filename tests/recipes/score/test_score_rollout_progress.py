"""A SCoRe training rollout shows its decoding as one phase over its turns (turn 1, the hint, turn 2), counted in
tokens per completion, so a step of minutes is not silent until it ends."""

import pytest

pytest.importorskip("transformers")

from score_cli import TINY  # noqa: E402


def test_a_rollout_counts_the_tokens_of_every_turn(capsys):
    from distlab.launch.launcher import preflight
    from distlab.run.logs import Progress
    from distlab.recipes.lm.models.source import load_causal_lm
    from distlab.recipes.lm.rewards.scorer import RewardScorer
    from distlab.recipes.lm.tasks.select import task_split
    from distlab.recipes.score import rollout

    overrides = [a for a in TINY if not a.startswith(("sft_", "evaluation."))] + ["guidance=frozen"]
    _, cfg = preflight("score", [], overrides, 1)
    tasks, _, few_shot = task_split(cfg.task)
    policy, tok = load_causal_lm(cfg.model.source)
    guide, gtok = load_causal_lm(cfg.model.source)
    players = rollout.Players(policy, tok, "text", guide, gtok, "text")
    opened: list[Progress] = []

    def phase(label: str, total: int, unit: str) -> Progress:  # Session.phase, printing every update
        opened.append(Progress(total, unit=unit, label=label, every_s=0.0, transient=True))
        return opened[-1]

    scorer = RewardScorer(cfg.sandbox, "text")
    try:
        episodes = rollout.play(cfg, players, tasks[:2], few_shot, scorer, n=2, temperature=1.0, hint_temperature=1.0,
                                seed=0, no_hint=False, phase=phase)
    finally:
        scorer.close()
    width, hint = cfg.sampling.max_completion_length, cfg.hint_max_tokens
    assert len(episodes) == 4 and len(opened) == 1 and opened[0].total == 2 * width + hint
    assert opened[0].done == 2 * width + hint  # every turn counted to its end
    lines = [x for x in capsys.readouterr().err.splitlines() if "rollout: token" in x]
    done = [int(x.split("token ")[1].split("/")[0]) for x in lines]
    assert done == sorted(done) and width in done and width + hint in done  # turn 1, then the hint, then turn 2
    assert "eta " in lines[0]
