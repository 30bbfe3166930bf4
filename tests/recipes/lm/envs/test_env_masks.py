"""Multi-turn episodes reach the loss with a per-token mask: exactly the policy's replies are trained, the
environment's tokens (test results, tool output, template glue) get no log-prob, no policy-gradient term and no KL.

The episode below is built by hand with the byte tokenizer (one token per byte), so every position is known:

    prompt "Q:"  | reply 1 "ab" | observation "\\nerr\\n" | reply 2 "cde"
    positions 0-1 | 2-3          | 4-8                   | 9-11
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

pytest.importorskip("transformers")

from distlab.recipes.lm.config import SamplingConfig  # noqa: E402
from distlab.recipes.lm.envs.api import ROLE_ENV, ROLE_POLICY, ROLE_PROMPT, Env, Step  # noqa: E402
from distlab.recipes.lm.envs.rollout import Sampler, play  # noqa: E402
from distlab.recipes.lm.envs.trajectory import Trajectory, encode  # noqa: E402
from distlab.recipes.lm.models.tiny import byte_tokenizer  # noqa: E402
from distlab.recipes.lm.pg.batching import sequences  # noqa: E402
from distlab.recipes.lm.pg.logprobs import logprobs  # noqa: E402
from distlab.recipes.lm.pg.loss import GlobalNorm, local_counts, policy_loss  # noqa: E402
from distlab.recipes.lm.rollout.stops import Completion  # noqa: E402

ROLE_TEST = 7
POLICY = [2, 3, 9, 10, 11]  # positions of the replies' tokens in the whole episode


def _episode(tok) -> Trajectory:
    t = Trajectory.start(0, encode(tok, "Q:"))
    t.add_reply(Completion(0, t.prompt_ids, encode(tok, "ab"), "ab", "stop"), ROLE_POLICY)
    t.add_observation(tok, [("\n", ROLE_ENV), ("err", ROLE_TEST), ("\n", ROLE_ENV)])
    t.add_reply(Completion(0, t.ids, encode(tok, "cde"), "cde", "length"), ROLE_POLICY)
    return t


def test_a_hand_built_episode_masks_exactly_the_policy_tokens():
    tok = byte_tokenizer()
    t = _episode(tok)
    assert t.ids == encode(tok, "Q:ab\nerr\ncde")
    assert t.mask == [1, 1, 0, 0, 0, 0, 0, 1, 1, 1]  # over token_ids, i.e. positions 2..11
    assert t.roles == [ROLE_PROMPT] * 2 + [ROLE_POLICY] * 2 + [ROLE_ENV, ROLE_TEST, ROLE_TEST, ROLE_TEST, ROLE_ENV] \
        + [ROLE_POLICY] * 3
    assert t.text == "ab\nerr\ncde" and t.turns == 2 and t.truncated  # the last reply ran out of tokens
    ids, attn, comp = sequences([t.prompt_ids, [5, 6, 7]], [t.token_ids, [8]], 0, torch.device("cpu"),
                                [t.mask, None])  # a single-turn row beside it keeps its whole completion
    assert comp[0].nonzero().flatten().tolist() == POLICY
    assert comp[1].nonzero().flatten().tolist() == [3] and attn[1].tolist() == [1] * 4 + [0] * 8
    assert local_counts(comp).tolist() == [2, 6]  # what every normaliser of the step is built from


def test_the_observation_cap_keeps_its_start_and_end():
    tok = byte_tokenizer()
    t = Trajectory.start(0, encode(tok, "Q"))
    t.add_observation(tok, [("0123456789", ROLE_ENV)], max_tokens=6)
    assert t.token_ids == encode(tok, "012789") and t.mask == [0] * 6 and t.cut_tokens == 4


def _hand_loss(model, ids, adv, ref, beta):
    """The loss the mask should give, from the full logits and only the policy positions: the GRPO sequence mean of
    -A rho + beta k3, rho = p / p.detach() (one update per rollout: rho is 1, its gradient that of log p)."""
    logp_all = model(input_ids=ids).logits.float().log_softmax(-1)
    logp = logp_all[0, torch.tensor(POLICY) - 1, ids[0, POLICY]]  # position t is predicted at t - 1
    d = ref - logp
    return (-adv * torch.exp(logp - logp.detach()) + beta * (torch.expm1(d) - d)).mean(), logp


def test_the_loss_and_its_gradient_ignore_the_environment_tokens():
    from distlab.recipes.lm.models.source import load_causal_lm

    model, _ = load_causal_lm("tiny:llama-2l", seed=0)
    tok = byte_tokenizer()
    t = _episode(tok)
    ids, attn, comp = sequences([t.prompt_ids], [t.token_ids], 0, torch.device("cpu"), [t.mask])
    ref = torch.zeros_like(ids, dtype=torch.float32)
    ref[0, POLICY] = torch.tensor([-5.0, -5.5, -6.0, -5.2, -4.9])
    adv, beta = torch.tensor([0.7]), 0.1
    logp, _ = logprobs(model, ids, attn, comp, chunk_tokens=4)
    env = [p for p in range(1, ids.shape[1]) if p not in POLICY]
    assert logp[0, env].abs().sum() == 0 and (logp[0, POLICY] != 0).all()  # env tokens are not even scored
    loss, stats = policy_loss(logp, None, ref, adv, comp, epsilon=0.2, beta=beta, loss_type="grpo",
                              norm=GlobalNorm.from_counts(local_counts(comp)))
    model.zero_grad()
    loss.backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    want, hand_logp = _hand_loss(model, ids, adv, ref[0, POLICY], beta)
    want.backward()
    torch.testing.assert_close(logp[0, POLICY].detach(), hand_logp.detach(), rtol=1e-5, atol=1e-5)
    assert float(loss.detach()) == pytest.approx(float(want.detach()), rel=1e-5, abs=1e-6)
    for name, p in model.named_parameters():
        torch.testing.assert_close(got[name], p.grad, rtol=1e-4, atol=1e-5, msg=name)
    # the same episode trained as one completion (no mask) is a different gradient: the check above can fail
    whole = sequences([t.prompt_ids], [t.token_ids], 0, torch.device("cpu"))[2]
    logp_whole, _ = logprobs(model, ids, attn, whole, chunk_tokens=4)
    model.zero_grad()
    policy_loss(logp_whole, None, logp_whole.detach(), adv, whole, epsilon=0.2, loss_type="grpo",
                norm=GlobalNorm.from_counts(local_counts(whole)))[0].backward()
    assert not torch.allclose(model.model.norm.weight.grad, got["model.norm.weight"], atol=1e-4)
    d = ref[0, POLICY] - hand_logp.detach()
    assert float(stats["kl_sum"]) == pytest.approx(float((torch.expm1(d) - d).sum()), rel=1e-5)  # KL: policy only
    assert float(stats["num_tokens"]) == len(POLICY)


class _Echo(Env):
    """Answers every reply with the same two pieces, for three turns."""

    max_turns = 3

    def reset(self) -> str:
        return "Q:"

    def step(self, reply: Completion) -> Step:
        return Step([("\n", ROLE_ENV), ("said", ROLE_TEST), ("\n", ROLE_ENV)], 0.5, False, {"steps": 1.0})


def test_the_driver_appends_replies_and_observations_with_the_mask():
    from distlab.recipes.lm.models.source import load_causal_lm

    model, tok = load_causal_lm("tiny:llama-2l", seed=0)
    sampler = Sampler(model, tok, SamplingConfig(max_completion_length=5, temperature=1.0))
    with ThreadPoolExecutor(2) as pool:
        played = play(sampler, [_Echo(), _Echo()], seed=3, pool=pool)
        again = play(sampler, [_Echo(), _Echo()], seed=3, pool=pool)
    said = encode(tok, "\nsaid\n")
    for t in played:
        assert t.turns == 3 and t.total_reward == 1.5 and t.info == {"steps": 3.0}
        r1, r2, r3 = (r.token_ids for r in t.replies)
        assert t.token_ids == r1 + said + r2 + said + r3
        assert t.mask == [1] * len(r1) + [0] * len(said) + [1] * len(r2) + [0] * len(said) + [1] * len(r3)
        assert t.replies[1].prompt_ids == t.prompt_ids + r1 + said  # turn 2 sampled after the episode's ids
    assert [t.token_ids for t in played] == [t.token_ids for t in again]  # the same seed plays the same episodes
    assert played[0].token_ids != played[1].token_ids  # each episode samples its own tokens
