"""Issue 46's arms as configs of the score recipe: each arm's rewards, advantages and loss mask on hand-built
episodes whose numbers are worked out by hand in the comments, the policy's execution feedback in turn 2, the
shuffled-reward control, and every arm's demo-cpu config.

Episodes of one prompt (G = 4) used below, (r1, r2):
  e0 (1, 1)  right y1 kept right      e1 (0, 1)  wrong y1 fixed
  e2 (0, 0)  wrong y1 still wrong     e3 (0, 0)  wrong y1 still wrong
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from distlab.config import resolve_config
from distlab.errors import DistlabError
from distlab.recipe import load_recipe
from distlab.recipes.lm.models.tiny import byte_tokenizer
from distlab.recipes.lm.rollout.stops import Completion
from distlab.recipes.lm.tasks import synthetic_tasks
from distlab.recipes.score.config import SELECTIVE_INSTRUCTION, ScoreConfig
from distlab.recipes.score.episode import (EXTRINSIC, ROLE_FEEDBACK, ROLE_PROMPT, ROLE_Y1, ROLE_Y2, Episode, encode,
                                           execution_feedback, turn2_prompt)
from distlab.recipes.score.objective import (TurnNorm, bandit_advantages, mc_advantages, score_policy_loss,
                                             selective_rewards, shuffled_pairs, step_counts, turn_returns,
                                             turn_rewards)
from distlab.recipes.score.rollout import unchanged
from distlab.recipes.score.train import arm_rewards

R1 = torch.tensor([1.0, 0.0, 0.0, 0.0])
R2 = torch.tensor([1.0, 1.0, 0.0, 0.0])
ARMS = ("score", "cocos", "bandit", "selective", "base", "shuffled")


def _episodes(r1, r2, kept=None):
    kept = kept or [False] * len(r1)
    return [SimpleNamespace(r1=float(a), r2=float(b), kept=k) for a, b, k in zip(r1, r2, kept)]


# ------------------------------------------------------------------------------------------ CoCoS
def test_cocos_credits_turn_one_with_both_turns_rewards():
    cfg = resolve_config(load_recipe("score"), ["demo-cpu", "arm-cocos"], [])
    rew1, rew2 = arm_rewards(cfg, _episodes(R1, R2), "II", seed=0)
    assert rew1.tolist() == [1, 0, 0, 0] and rew2.tolist() == [1, 1, 0, 0]  # alpha = 0: no bonus
    ret1, ret2 = turn_returns(rew1, rew2, cfg.gamma)
    assert ret1.tolist() == [2, 1, 0, 0]  # R1 = r1 + r2
    a1, a2, _ = mc_advantages(ret1, ret2, 4, "none")
    # group means: R1 3/4, R2 1/2
    assert a1.tolist() == pytest.approx([1.25, 0.25, -0.75, -0.75])
    assert a2.tolist() == pytest.approx([0.5, 0.5, -0.5, -0.5])


def test_score_as_published_runs_stage_one_then_the_alpha_bonus_reaching_turn_one():
    cfg = resolve_config(load_recipe("score"), ["demo-cpu", "arm-score"], [])
    assert (cfg.stage_schedule, cfg.alpha, cfg.gamma) == ("I:20,II:*", 10.0, 1.0)
    rew1, rew2 = arm_rewards(cfg, _episodes(R1, R2), "II", seed=0)
    # turn 2: r2 + 10 (r2 - r1) = [1, 11, 0, 0]; R1 = r1 + rew2 = [2, 11, 0, 0]: the fix outranks the copy
    assert rew2.tolist() == [1, 11, 0, 0]
    assert turn_returns(rew1, rew2, cfg.gamma)[0].tolist() == [2, 11, 0, 0]
    rew1, rew2 = arm_rewards(cfg, _episodes(R1, R2), "I", seed=0)
    assert rew1.tolist() == [0, 0, 0, 0] and rew2.tolist() == [1, 1, 0, 0]


# ------------------------------------------------------------------------------------------ bandit
def test_bandit_compares_turn_two_only_with_turn_twos_after_an_equal_r1():
    a1, a2 = bandit_advantages(R1, R2, 4)
    assert a1.tolist() == [0, 0, 0, 0]
    # e0 is alone with r1 = 1: 0; e1..e3 (r1 = 0) have mean r2 = 1/3
    assert a2.tolist() == pytest.approx([0.0, 2 / 3, -1 / 3, -1 / 3])
    # the group mean over all four would have charged e0 for the y1 it was handed: +0.5 instead of 0
    assert mc_advantages(R1, R2, 4, "none")[1].tolist() == pytest.approx([0.5, 0.5, -0.5, -0.5])
    # r2 and r2 - r1 are the same reward within a cell
    assert bandit_advantages(R1, R2 - R1, 4)[1].tolist() == pytest.approx(a2.tolist())


def _loss_grad(turns, stage="I"):
    """d loss / d logp on two episodes: x x | y1 y1 | glue | y2 y2 (and one y2 token fewer in the second)."""
    P, Y1, Y2, G = ROLE_PROMPT, ROLE_Y1, ROLE_Y2, 2
    roles = torch.tensor([[P, P, Y1, Y1, G, Y2, Y2], [P, P, Y1, Y1, G, Y2, -1]])
    logp = torch.full(roles.shape, -1.0, requires_grad=True)
    ref = torch.full(roles.shape, -1.0)
    ref[roles == Y1] = -2.0  # turn 1 away from the reference: a KL gradient if turn 1 had a loss term
    a1, a2 = torch.tensor([1.0, -1.0]), torch.tensor([0.5, -0.5])
    adv = torch.where(roles == Y1, a1[:, None], torch.where(roles == Y2, a2[:, None], torch.tensor(0.0)))
    kl_w = (roles == Y1).float() * 0.1 + (roles == Y2).float() * 0.0
    norm = TurnNorm.from_counts(step_counts(roles))
    loss, stats = score_policy_loss(logp, None, ref, adv, roles, kl_w, epsilon=0.2, loss_type="token", norm=norm,
                                    turns=turns)
    loss.backward()
    return logp.grad, roles, stats


def test_bandit_loss_puts_no_gradient_on_turn_one_tokens():
    grad, roles, stats = _loss_grad(turns=(2,))
    assert torch.all(grad[roles == ROLE_Y1] == 0)  # neither the advantage nor the turn-1 KL reaches them
    # on-policy token loss: d(-rho A)/dlogp = -A, averaged over turn 2's 3 tokens
    assert grad[0, 5:7].tolist() == pytest.approx([-0.5 / 3] * 2)
    assert grad[1, 5].item() == pytest.approx(0.5 / 3)
    assert torch.all(grad[(roles != ROLE_Y1) & (roles != ROLE_Y2)] == 0)
    assert float(stats["tokens_y1"]) == 0 and float(stats["kl_y1_sum"]) == 0
    # the same batch with both turns trained: turn 1 gets -A1 / 4 plus the KL term's pull
    both, _, _ = _loss_grad(turns=(1, 2))
    assert torch.all(both[roles == ROLE_Y1] != 0)
    assert torch.equal(both[roles == ROLE_Y2], grad[roles == ROLE_Y2])


# ------------------------------------------------------------------------------------------ selective
def test_selective_reward_pays_a_right_keep_or_rewrite_verdict():
    #        right y1: kept, rewrote right, rewrote wrong | wrong y1: kept, fixed, rewrote still wrong
    r1 = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    r2 = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    kept = torch.tensor([True, False, False, True, False, False])
    rew1, rew2 = selective_rewards(r1, r2, kept, bonus=0.5)
    assert rew1.tolist() == r1.tolist()
    assert rew2.tolist() == [1.5, 1.0, 0.0, 0.0, 1.5, 0.5]
    cfg = resolve_config(load_recipe("score"), ["demo-cpu", "arm-selective"], [])
    assert cfg.instruction == SELECTIVE_INSTRUCTION and cfg.gamma == 0.0
    eps = _episodes(r1.tolist(), r2.tolist(), kept.tolist())
    assert arm_rewards(cfg, eps, "I", seed=0)[1].tolist() == [1.5, 1.0, 0.0, 0.0, 1.5, 0.5]  # stage plays no part


def test_unchanged_reads_the_program_not_its_comments_or_spacing():
    task = synthetic_tasks(1, seed=0)[0]
    y1 = "def f(x):\n    return x + 6\n```\n"
    assert unchanged(task, y1, "def f(x):\n    # add six\n    return x+6\n```\nmore text", "text")
    assert not unchanged(task, y1, "def f(x):\n    return x + 7\n```\n", "text")
    assert unchanged(task, "no code", "still none", "text")


# ------------------------------------------------------------------------------------------ controls
def test_shuffled_rewards_move_whole_pairs_between_episodes():
    rew1, rew2 = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0]), torch.tensor([1.0, 1.0, 0.0, 0.0, 0.5])
    s1, s2 = shuffled_pairs(rew1, rew2, seed=3)
    assert sorted(zip(s1.tolist(), s2.tolist())) == sorted(zip(rew1.tolist(), rew2.tolist()))
    assert not (torch.equal(s1, rew1) and torch.equal(s2, rew2))  # moved
    assert torch.equal(shuffled_pairs(rew1, rew2, seed=3)[1], s2)  # seeded: the same permutation again
    cfg = resolve_config(load_recipe("score"), ["demo-cpu", "arm-shuffled"], [])
    plain = resolve_config(load_recipe("score"), ["demo-cpu", "arm-score"], [])
    eps = _episodes(R1, R2)
    got = arm_rewards(cfg, eps, "II", seed=7)
    want = shuffled_pairs(*arm_rewards(plain, eps, "II", seed=7), seed=7)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_every_arm_resolves_on_demo_cpu_with_equal_compute():
    recipe = load_recipe("score")
    cfgs = {a: resolve_config(recipe, ["demo-cpu", f"arm-{a}"], []) for a in ARMS}
    assert {a: c.arm.value for a, c in cfgs.items()} == {"score": "score", "cocos": "score", "bandit": "bandit_t2",
                                                         "selective": "selective", "base": "score",
                                                         "shuffled": "score"}
    trained = [c for a, c in cfgs.items() if a != "base"]
    sizes = {(c.steps, c.prompts_per_step, c.num_generations, c.sampling.max_completion_length) for c in trained}
    assert sizes == {(100, 8, 4, 40)}
    assert cfgs["base"].steps == 0 and cfgs["shuffled"].shuffle_rewards
    assert resolve_config(recipe, ["demo-cpu", "arm-bandit"], ["policy_sees_execution=true"]).policy_sees_execution


def test_bandit_with_a_critic_and_negative_steps_are_refused():
    with pytest.raises(DistlabError, match="bandit_t2"):
        load_recipe("score").validate(ScoreConfig(arm="bandit_t2", advantage="critic"), 1)
    with pytest.raises(DistlabError, match="steps=-1"):
        resolve_config(load_recipe("score"), [], ["steps=-1"])


# ------------------------------------------------------------------------------------------ extrinsic
@pytest.mark.parametrize("mode", ["text", "chat"])
def test_policy_feedback_sits_in_turn_two_prompt_and_is_never_trained(mode):
    from distlab.recipes.lm.tasks.prompts import prompt_text

    tok, task = byte_tokenizer(), synthetic_tasks(1, seed=0)[0]
    prompt1 = prompt_text(task, tok, mode, [])
    p_ids, code = encode(tok, prompt1), "def f(x):\n    return x\n"
    y1_text = code if mode == "text" else f"```python\n{code}```"
    y1_ids = encode(tok, code + "```") if mode == "text" else encode(tok, y1_text) + [tok.eos_token_id]
    y1 = Completion(0, p_ids, y1_ids, y1_text, "stop" if mode == "text" else "eos")
    ep = Episode(task=task, group=0)
    ep.extend(p_ids, ROLE_PROMPT)
    ep.y1 = y1
    ep.extend(y1_ids, ROLE_Y1)
    fb = execution_feedback(task, "failed", "Traceback...\nAssertionError: assert f(4) == 10\n")
    assert fb == f"{EXTRINSIC}: failed. Traceback...\nAssertionError: assert f(4) == 10"
    assert execution_feedback(task, "passed", "") == f"{EXTRINSIC}: passed every test."
    ids, roles = turn2_prompt(ep, tok, mode, prompt1, "check the operator", "Fix it.", feedback=fb)
    assert ids[: len(p_ids) + len(y1_ids)] == p_ids + y1_ids  # turn 1 exactly as sampled
    shown = tok.decode([i for i, r in zip(ids, roles) if r == ROLE_FEEDBACK])
    assert shown == fb
    text = tok.decode(ids[len(ep.ids):])
    assert text.index(fb) < text.index("check the operator") < text.index("Fix it.")  # the result, then the rest
    bare_ids, bare_roles = turn2_prompt(ep, tok, mode, prompt1, "", "Fix it.")
    assert fb not in tok.decode(bare_ids) and ROLE_FEEDBACK not in bare_roles
    assert ROLE_FEEDBACK not in (ROLE_Y1, ROLE_Y2)  # turn_masks train y1 and y2 only


def test_feedback_label_counts_the_policys_feedback():
    from distlab.recipes.score.evaluate import feedback_label

    assert feedback_label(ScoreConfig()) == "intrinsic"
    assert feedback_label(ScoreConfig(policy_sees_execution=True)) == "extrinsic"
    assert feedback_label(ScoreConfig(hint_sees_execution=True)) == "intrinsic"  # no guidance: nobody sees it
