"""SCoRe's per-turn masks, KL weights, rewards and loss on constructed token sequences (pure tensors, no LM)."""

import pytest
import torch

from distlab.recipes.lm.models.tiny import byte_tokenizer
from distlab.recipes.lm.rollout.stops import Completion
from distlab.recipes.lm.tasks import synthetic_tasks, text_prompt
from distlab.recipes.score.episode import (ROLE_GLUE, ROLE_HINT, ROLE_INSTR, ROLE_PAD, ROLE_PROMPT, ROLE_Y1, ROLE_Y2,
                                           Episode, encode, leaks_code, turn2_prompt)
from distlab.recipes.score.objective import (TurnNorm, guidance_rewards, kl_weights, mc_advantages,
                                             score_policy_loss, step_counts, token_advantages, turn_masks,
                                             turn_rewards, turn_returns)

P, Y1, G, H, I, Y2, X = ROLE_PROMPT, ROLE_Y1, ROLE_GLUE, ROLE_HINT, ROLE_INSTR, ROLE_Y2, ROLE_PAD
# two episodes: x | y1 | glue hint glue | instruction | y2 | padding
ROLES = torch.tensor([[P, P, Y1, Y1, Y1, G, H, H, G, I, I, G, Y2, Y2, X],
                      [P, P, P, Y1, Y1, G, H, G, I, I, I, G, Y2, Y2, Y2]])
IS_Y1, IS_Y2 = ROLES == Y1, ROLES == Y2
OTHER = ~(IS_Y1 | IS_Y2)


def test_turn_masks_select_only_the_policys_tokens():
    m1, m2 = turn_masks(ROLES)
    assert torch.equal(m1, IS_Y1) and torch.equal(m2, IS_Y2)
    assert not (m1 & m2).any()
    for role in (P, G, H, I, X):  # prompt, glue, hint, instruction and padding are never trained
        assert not (m1 | m2)[ROLES == role].any()


@pytest.mark.parametrize("stage, w_y1, w_y2", [("I", 0.5, 0.05), ("II", 0.05, 0.05)])
def test_kl_weights_per_turn_and_stage(stage, w_y1, w_y2):
    w = kl_weights(ROLES, stage, beta1=0.05, beta2=0.5)
    assert torch.all(w[IS_Y1] == w_y1) and torch.all(w[IS_Y2] == w_y2)
    assert torch.all(w[OTHER] == 0)  # nothing on hint, instruction, glue, prompt or padding


def test_alpha_enters_turn_two_reward_only():
    r1, r2 = torch.tensor([0.0, 1.0, 1.0, 0.0]), torch.tensor([1.0, 0.0, 1.0, 0.0])
    for alpha in (0.0, 3.0, 10.0):
        rew1, rew2 = turn_rewards(r1, r2, "II", alpha)
        assert torch.equal(rew1, r1)  # the turn-1 reward never sees alpha
        assert torch.allclose(rew2, r2 + alpha * (r2 - r1))
    rew1, rew2 = turn_rewards(r1, r2, "I", 10.0)
    assert torch.equal(rew1, torch.zeros(4)) and torch.equal(rew2, r2)  # stage I: r(y2) only, no bonus
    ret1, ret2 = turn_returns(*turn_rewards(r1, r2, "II", 2.0), gamma=1.0)
    # stage II total: r1 + r2 + alpha (r2 - r1)
    assert torch.allclose(ret1, r1 + r2 + 2.0 * (r2 - r1)) and torch.allclose(ret2, r2 + 2.0 * (r2 - r1))


def test_mc_advantages_subtract_each_turns_group_mean():
    ret1 = torch.tensor([1.0, 3.0, 0.0, 0.0])
    ret2 = torch.tensor([2.0, 0.0, 1.0, 1.0])
    a1, a2, zero_var = mc_advantages(ret1, ret2, group_size=2)
    assert torch.allclose(a1, torch.tensor([-1.0, 1.0, 0.0, 0.0]))
    assert torch.allclose(a2, torch.tensor([1.0, -1.0, 0.0, 0.0]))
    assert zero_var == 0.5
    adv = token_advantages(ROLES[:2], torch.tensor([2.0, -1.0]), torch.tensor([5.0, 7.0]))
    assert torch.all(adv[0][IS_Y1[0]] == 2.0) and torch.all(adv[0][IS_Y2[0]] == 5.0)
    assert torch.all(adv[OTHER] == 0)


def test_stage_two_ranks_a_fix_above_a_copy_and_a_break_below_a_failure():
    """One prompt's group: copy a right y1, fix a wrong one, fail twice, break a right one (r1, r2 per episode).

    Advantages of different states only; what turn 1 and turn 2 learn from them is in test_score_credit.py."""
    r1, r2 = torch.tensor([1.0, 0.0, 0.0, 1.0]), torch.tensor([1.0, 1.0, 0.0, 0.0])
    for scale in ("none", "group"):
        _, a2, _ = mc_advantages(*turn_returns(*turn_rewards(r1, r2, "II", 3.0), gamma=0.0), group_size=4,
                                 scale_rewards=scale)
        copy, fix, fail, brk = a2.tolist()
        assert fix > copy and fail > brk, (scale, a2)
        assert fix - copy == pytest.approx(3.0 if scale == "none" else 3.0 / float(torch.tensor(
            [1.0, 4.0, 0.0, -3.0]).std()), rel=1e-3)
    # without the bonus (alpha 0) a copy and a fix are worth the same: the bonus is what separates them
    _, a2, _ = mc_advantages(*turn_returns(*turn_rewards(r1, r2, "II", 0.0), gamma=0.0), group_size=4)
    assert a2[0] == a2[1]


def _loss(stage, adv1, adv2, d, loss_type="token", beta1=0.1, beta2=1.0):
    logp = torch.full(ROLES.shape, -1.0, requires_grad=True)
    ref = logp.detach() + d  # d = ref - logp on every position
    norm = TurnNorm.from_counts(step_counts(ROLES))
    adv = token_advantages(ROLES, torch.tensor(adv1), torch.tensor(adv2))
    loss, stats = score_policy_loss(logp, None, ref, adv, ROLES, kl_weights(ROLES, stage, beta1, beta2), epsilon=0.2,
                                    kl="k2", loss_type=loss_type, norm=norm)
    loss.backward()
    return loss, stats, logp.grad


def test_gradient_never_reaches_hint_or_instruction_tokens():
    for stage in ("I", "II"):
        _, _, grad = _loss(stage, [1.0, -2.0], [0.5, 3.0], d=0.3, loss_type="turn")
        assert torch.all(grad[OTHER] == 0)
        assert torch.all(grad[IS_Y1 | IS_Y2] != 0)


def test_stage_one_kl_gradient_is_beta2_on_turn_one_and_beta1_on_turn_two():
    # no advantage: only the KL term moves the policy; k2 = d^2 / 2 has gradient -d per token
    # each turn's tokens are averaged over that turn's own count (5 y1 and 5 y2 tokens here)
    _, stats, grad = _loss("I", [0.0, 0.0], [0.0, 0.0], d=0.4, beta1=0.1, beta2=1.0)
    t1, t2 = int(IS_Y1.sum()), int(IS_Y2.sum())
    assert torch.allclose(grad[IS_Y1], torch.full_like(grad[IS_Y1], -1.0 * 0.4 / t1))
    assert torch.allclose(grad[IS_Y2], torch.full_like(grad[IS_Y2], -0.1 * 0.4 / t2))
    _, _, grad2 = _loss("II", [0.0, 0.0], [0.0, 0.0], d=0.4, beta1=0.1, beta2=1.0)
    assert torch.allclose(grad2[IS_Y1], grad2[IS_Y2][0].expand(int(IS_Y1.sum())))
    assert stats["kl_y1_sum"] == pytest.approx(0.5 * 0.4 ** 2 * int(IS_Y1.sum()))


def test_loss_value_by_hand_for_both_aggregations():
    # ratio 1 and no KL: the loss is minus the advantage averaged the chosen way within each turn, summed over turns
    loss, _, _ = _loss("II", [1.0, 2.0], [3.0, 4.0], d=0.0, loss_type="token", beta1=0.0, beta2=0.0)
    n1, n2 = IS_Y1.sum(1).tolist(), IS_Y2.sum(1).tolist()  # y1: 3 and 2 tokens; y2: 2 and 3
    want = -(1 * 3 + 2 * 2) / 5 - (3 * 2 + 4 * 3) / 5
    assert (n1, n2) == ([3, 2], [2, 3]) and float(loss.detach()) == pytest.approx(want)
    loss, _, _ = _loss("II", [1.0, 2.0], [3.0, 4.0], d=0.0, loss_type="turn", beta1=0.0, beta2=0.0)
    assert float(loss.detach()) == pytest.approx(-(1 + 2) / 2 - (3 + 4) / 2)  # per turn: mean over its 2 segments


def test_guidance_reward_is_improvement_less_penalties():
    g = guidance_rewards(torch.tensor([0.0, 1.0, 0.0]), torch.tensor([1.0, 1.0, 0.0]), torch.tensor([10, 20, 40]),
                         torch.tensor([0, 0, 1]), max_tokens=40, len_penalty=0.2, leak_penalty=1.0)
    assert torch.allclose(g, torch.tensor([1.0 - 0.05, 0.0 - 0.1, 0.0 - 0.2 - 1.0]))
    assert leaks_code("use def f(x): return x", ["def ", "return "])
    assert leaks_code("```python", ["```"]) and not leaks_code("check the operator you used", ["def ", "```"])


@pytest.mark.parametrize("mode", ["text", "chat"])
def test_turn_two_prompt_roles_cover_exactly_the_hint_and_the_instruction(mode):
    tok = byte_tokenizer()
    task = synthetic_tasks(1, seed=0)[0]
    from distlab.recipes.lm.tasks.prompts import prompt_text

    prompt1 = prompt_text(task, tok, mode, [])
    p_ids = encode(tok, prompt1)
    y1_text = "def f(x):\n    return x\n"
    y1_ids = encode(tok, y1_text + "```") if mode == "text" else encode(tok, f"```python\n{y1_text}```") + [
        tok.eos_token_id]
    y1 = Completion(0, p_ids, y1_ids, y1_text if mode == "text" else f"```python\n{y1_text}```",
                    "stop" if mode == "text" else "eos")
    ep = Episode(task=task, group=0)
    ep.extend(p_ids, ROLE_PROMPT)
    ep.y1 = y1
    ep.extend(y1_ids, ROLE_Y1)
    hint, instruction = "check the operator", "Review your solution and write a corrected or improved version."
    ids, roles = turn2_prompt(ep, tok, mode, prompt1, hint, instruction)
    r = torch.tensor(roles)
    ids_t = torch.tensor(ids)

    def text_of(role):
        return tok.decode(ids_t[r == role].tolist())

    assert text_of(ROLE_HINT) == hint and text_of(ROLE_INSTR) == instruction
    assert ids[: len(p_ids) + len(y1_ids)] == p_ids + y1_ids  # turn 1 exactly as sampled, ids not re-tokenised
    full = tok.decode(ids)
    if mode == "chat":  # the conversation the template would render, ending with the assistant header
        assert full.endswith("<|im_start|>assistant\n") and full.count("<|im_end|>") == 3
    else:
        assert full.endswith("```python\n") and "Hint: check the operator\n" in full
    bare, bare_roles = turn2_prompt(ep, tok, mode, prompt1, "", instruction)
    assert ROLE_HINT not in bare_roles and "Hint" not in tok.decode(bare)
