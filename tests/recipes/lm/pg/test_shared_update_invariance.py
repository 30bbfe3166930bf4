"""The shared LM update step gives the same weights however a step is split over gloo ranks.

``lm/update.py`` runs both recipes' updates: micro-batches under DDP's ``no_sync``, gradients
all-reduced once, clipping, the optimizer step. A tiny float64 policy (an embedding and a head,
wrapped in real DDP) is updated on one fixed step of 8 sequences with GRPO's loss and with SCoRe's
two-turn loss, on 1, 2 and 4 real processes with micro-batches of 2. The updated weights must agree
to float64 rounding; a split normalised by local counts (the bug the global counts prevent) must not.
"""

import contextlib

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from mp import run_ranks

from distlab.recipes.lm.pg.batching import micro_batches
from distlab.recipes.lm.pg.loss import GlobalNorm, group_advantages, local_counts, policy_loss
from distlab.recipes.lm.pg.update import policy_update
from distlab.recipes.score.episode import ROLE_PROMPT, ROLE_Y1, ROLE_Y2
from distlab.recipes.score.objective import TurnNorm, kl_weights, score_policy_loss, step_counts, token_advantages
from distlab.runtime.dist import Runtime

F64 = torch.float64
V, D, T, N_SEQ, G = 7, 5, 9, 8, 4


class TinyPolicy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.emb = nn.Parameter(torch.randn(V, D, generator=g, dtype=F64))
        self.head = nn.Parameter(torch.randn(V, D, generator=g, dtype=F64))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """log p(ids[:, t] | ids[:, t-1]) at every position (0 at t = 0)."""
        logits = self.emb[ids[:, :-1]] @ self.head.T
        logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        return nn.functional.pad(logp, (1, 0))


class _Session:
    """What ``policy_update`` asks of a session: the autocast of the trained pass (fp32 here)."""

    def autocast(self):
        return contextlib.nullcontext()


def _step():
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(0, V, (N_SEQ, T), generator=g)
    lengths = torch.tensor([3, 9, 5, 7, 4, 8, 6, 9])
    roles = torch.full((N_SEQ, T), ROLE_PROMPT)
    for i, n in enumerate(lengths.tolist()):  # prompt 2 tokens, y1 up to the middle, y2 to the end
        mid = 2 + (n - 2) // 2
        roles[i, 2:mid] = ROLE_Y1
        roles[i, mid:n] = ROLE_Y2
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.0, 1.0, 0.0], dtype=F64)
    ref = torch.randn(N_SEQ, T, generator=g, dtype=F64) * 0.1 - 1.5
    return ids, roles, rewards, ref


def _update(rank: int, world_size: int, recipe: str, local_norm: bool = False) -> list[float]:
    rt = Runtime.from_process_group()
    torch.manual_seed(0)
    model = TinyPolicy()
    policy = DDP(model) if world_size > 1 else model
    opt = torch.optim.SGD(policy.parameters(), lr=0.5)
    ids, roles, rewards, ref = _step()
    per_rank = N_SEQ // world_size
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    ids, roles, ref = ids[mine], roles[mine], ref[mine]
    adv, _ = group_advantages(rewards, G, "group")
    if recipe == "grpo":
        mask = roles != ROLE_PROMPT
        counts = local_counts(mask)
        adv_rows = adv[mine]
    else:
        counts = step_counts(roles)
        adv_tok = token_advantages(roles, adv[mine], -0.5 * adv[mine])
        kl_w = kl_weights(roles, "I", 0.05, 0.5)
    counts = counts if local_norm else rt.all_reduce_sum(counts)
    norm = GlobalNorm.from_counts(counts) if recipe == "grpo" else TurnNorm.from_counts(counts)
    batches = micro_batches(per_rank, 2)

    def micro_loss(m: int):
        sl = batches[m]
        logp = policy(ids[sl])
        if recipe == "grpo":
            return policy_loss(logp, None, ref[sl], adv_rows[sl], mask[sl], epsilon=0.2, beta=0.04, kl="k3",
                               loss_type="grpo", norm=norm, world_size=world_size)
        return score_policy_loss(logp, None, ref[sl], adv_tok[sl], roles[sl], kl_w[sl], epsilon=0.2,
                                 loss_type="turn", norm=norm, world_size=world_size)

    sums, _ = policy_update(_Session(), policy, opt, len(batches), micro_loss, iterations=1, max_grad_norm=1e9)
    assert sums["objective"] != 0.0
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()  # tensors would share memory


def _every_variant(rank: int, world_size: int) -> dict[str, list[float]]:
    """Both recipes' updates, and SCoRe's with local normalisers, from one launch of the ranks."""
    return {"grpo": _update(rank, world_size, "grpo"), "score": _update(rank, world_size, "score"),
            "score_local": _update(rank, world_size, "score", True)}


def test_updated_weights_do_not_depend_on_the_world_size():
    before = torch.cat([p.detach().reshape(-1) for p in TinyPolicy().parameters()])
    one = {k: torch.tensor(v, dtype=F64) for k, v in _every_variant(0, 1).items()}
    for recipe in ("grpo", "score"):
        assert (one[recipe] - before).abs().max() > 1e-3  # the step moved the weights
    for world in (2, 4):
        for got in run_ranks(_every_variant, world):
            for recipe in ("grpo", "score"):
                torch.testing.assert_close(torch.tensor(got[recipe], dtype=F64), one[recipe], rtol=0, atol=1e-12)
            # normalising by each rank's own counts (what the global counts prevent) changes the update
            assert (torch.tensor(got["score_local"], dtype=F64) - one["score"]).abs().max() > 1e-6
