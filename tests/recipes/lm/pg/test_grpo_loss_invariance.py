"""The GRPO gradient is the same however the step's sequences are split: micro-batches and gloo ranks.

A tiny linear policy (logits = W x per token, float64) scores a fixed step batch of 8 sequences of
unequal lengths (one truncated and masked out). The full-batch gradient in one process is the
reference; gradient accumulation over 2 and 4 micro-batches and 2 and 4 real gloo ranks (gradients
all-reduced with SUM then divided by world size, as DDP does; the 2-rank worlds are pairs inside one
4-process launch, with 2 micro-batches per rank) must reproduce it for every loss type, with beta > 0.
A naive split that normalises by local counts must not.
"""

import time

import pytest
import torch
import torch.distributed as dist

from mp import run_ranks

from distlab.recipes.lm.pg.loss import (LOSS_TYPES, GlobalNorm, apply_truncation_mask, group_advantages,
                                       local_counts, policy_loss, reward_moments, std_from_moments)

F64 = torch.float64
V, D, T, N_SEQ, G = 6, 4, 7, 8, 4
LENGTHS = [1, 7, 3, 5, 2, 6, 4, 7]
TRUNCATED = [False, False, False, False, False, False, False, True]  # the last one hit the length limit
MAX_LEN = 9
KW = dict(epsilon=0.2, epsilon_high=0.28, beta=0.05, kl="k3", max_completion_length=MAX_LEN)


def make_step():
    """Weights and one step's data, identical in every process (fixed seed, float64)."""
    g = torch.Generator().manual_seed(1234)
    w = torch.randn(V, D, generator=g, dtype=F64)
    w_old = w + 0.3 * torch.randn(V, D, generator=g, dtype=F64)  # ratios far enough from 1 to clip
    w_ref = w + 0.5 * torch.randn(V, D, generator=g, dtype=F64)
    x = torch.randn(N_SEQ, T, D, generator=g, dtype=F64)
    actions = torch.randint(0, V, (N_SEQ, T), generator=g)
    mask = torch.arange(T)[None, :] < torch.tensor(LENGTHS)[:, None]
    mask = apply_truncation_mask(mask, torch.tensor(TRUNCATED))
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.0, 1.0, 0.0], dtype=F64)  # 2 groups of G = 4
    adv, _ = group_advantages(rewards, G, "group")
    return w, w_old, w_ref, x, actions, mask, rewards, adv


def token_logp(w: torch.Tensor, x: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(x @ w.T, dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)


def grad_over(seq_chunks, loss_type, norm, world_size=1):
    """Accumulate loss.backward() over micro-batches (lists of sequence indices); return dL/dW."""
    w, w_old, w_ref, x, actions, mask, _, adv = make_step()
    w = w.clone().requires_grad_(True)
    for idx in seq_chunks:
        idx = torch.tensor(idx)
        logp = token_logp(w, x[idx], actions[idx])
        with torch.no_grad():
            old = token_logp(w_old, x[idx], actions[idx])
            ref = token_logp(w_ref, x[idx], actions[idx])
        loss, _ = policy_loss(logp, old, ref, adv[idx], mask[idx], loss_type=loss_type, norm=norm,
                              world_size=world_size, **KW)
        loss.backward()
    return w.grad.detach().clone()


def global_norm():
    return GlobalNorm.from_counts(local_counts(make_step()[5]))


def reference_grads():
    return {lt: grad_over([list(range(N_SEQ))], lt, global_norm()) for lt in LOSS_TYPES}


def split(indices, parts):
    """Contiguous, deliberately unequal chunks (first chunk smallest)."""
    cuts = {2: [3], 4: [1, 3, 6]}[parts] if len(indices) == N_SEQ else {2: [1]}[parts]
    bounds = [0, *cuts, len(indices)]
    return [indices[a:b] for a, b in zip(bounds, bounds[1:])]


def test_the_batch_has_clipping_on_both_sides_and_unequal_lengths():
    """Guard that the invariance below is tested on a non-trivial batch."""
    w, w_old, _, x, actions, mask, _, adv = make_step()
    rho = (token_logp(w, x, actions) - token_logp(w_old, x, actions)).exp()
    a = adv[:, None].expand_as(rho)
    assert ((rho < 0.8) & (a < 0) & mask).any() and ((rho > 1.28) & (a > 0) & mask).any()
    assert ((rho > 0.8) & (rho < 1.28) & mask).any()
    assert global_norm() == GlobalNorm(num_seqs=7, num_tokens=28)


def _objective_written_out(w: torch.Tensor, loss_type: str) -> torch.Tensor:
    """The full-batch objective spelled out token by token, independent of policy_loss."""
    _, w_old, w_ref, x, actions, mask, _, adv = make_step()
    logp, old, ref = token_logp(w, x, actions), token_logp(w_old, x, actions), token_logp(w_ref, x, actions)
    seqs = [b for b in range(N_SEQ) if mask[b].any()]
    n_tok = sum(int(mask[b].sum()) for b in seqs)
    total = torch.zeros((), dtype=F64)
    for b in seqs:
        seq_sum = torch.zeros((), dtype=F64)
        for i in range(T):
            if not mask[b, i]:
                continue
            rho = torch.exp(logp[b, i] - old[b, i])
            a = adv[b]
            pg = -torch.minimum(rho * a, torch.clamp(rho, 0.8, 1.28) * a)
            d = ref[b, i] - logp[b, i]
            seq_sum = seq_sum + pg + 0.05 * (torch.exp(d) - d - 1)
        total = total + (seq_sum / int(mask[b].sum()) if loss_type == "grpo" else seq_sum)
    return total / {"grpo": len(seqs), "bnpo": n_tok, "dapo": n_tok, "dr_grpo": len(seqs) * MAX_LEN}[loss_type]


def test_full_batch_gradient_matches_the_objective_written_out():
    ref = reference_grads()
    for lt in LOSS_TYPES:
        w = make_step()[0].clone().requires_grad_(True)
        _objective_written_out(w, lt).backward()
        torch.testing.assert_close(w.grad, ref[lt], rtol=0, atol=1e-12)


@pytest.mark.parametrize("parts", [2, 4])
def test_gradient_accumulation_matches_full_batch(parts):
    ref = reference_grads()
    chunks = split(list(range(N_SEQ)), parts)
    for lt in LOSS_TYPES:
        assert ref[lt].abs().max() > 1e-3
        torch.testing.assert_close(grad_over(chunks, lt, global_norm()), ref[lt], rtol=0, atol=1e-6)


def test_local_normalisation_would_break_invariance():
    """Negative control: per-micro-batch counts (the classic bug) change the gradient for every type."""
    mask = make_step()[5]
    ref = reference_grads()
    chunks = split(list(range(N_SEQ)), 2)
    for lt in LOSS_TYPES:
        naive = sum(grad_over([c], lt, GlobalNorm.from_counts(local_counts(mask[torch.tensor(c)])))
                    for c in chunks) / len(chunks)
        assert (naive - ref[lt]).abs().max() > 1e-4, lt


def _dp_grads(rank: int, world_size: int, micro_batches: int, group) -> tuple[GlobalNorm, dict]:
    """One DDP-like rank: global counts by one all-reduce, local accumulation, SUM all-reduce / W."""
    _, _, _, _, _, mask, _, _ = make_step()
    mine = split(list(range(N_SEQ)), world_size)[rank]
    chunks = split(mine, micro_batches) if micro_batches > 1 else [mine]
    counts = sum(local_counts(mask[torch.tensor(c)]) for c in chunks)
    dist.all_reduce(counts, group=group)
    norm = GlobalNorm.from_counts(counts)
    grads = {}
    for lt in LOSS_TYPES:
        grad = grad_over(chunks, lt, norm, world_size=world_size)
        dist.all_reduce(grad, group=group)
        grads[lt] = (grad / world_size).tolist()  # plain floats: tensors would travel as shared memory
    return norm, grads


def _rank_fn(rank: int, world_size: int):
    """4 ranks: the whole world (1 micro-batch each) and two independent pairs (2 micro-batches each).

    One launch covers both world sizes: starting processes is most of the cost on 2 cores.
    """
    torch.set_num_threads(1)
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # every rank creates every group, in order
    pair = pairs[rank // 2]
    out = {"ws4": _dp_grads(rank, world_size, 1, None), "ws2": _dp_grads(rank % 2, 2, 2, pair)}
    rewards = make_step()[6]
    mine = rewards[(rank % 2) * G:(rank % 2 + 1) * G]  # each rank of a pair holds one whole group
    mom = reward_moments(mine)
    dist.all_reduce(mom, group=pair)
    out["batch_adv"] = group_advantages(mine, G, "batch", batch_std=std_from_moments(mom))[0].tolist()
    return out


def test_gloo_ranks_match_full_batch():
    ref = reference_grads()
    t0 = time.perf_counter()
    results = run_ranks(_rank_fn, 4)
    print(f"4 gloo ranks (world of 4 and two pairs): {time.perf_counter() - t0:.1f} s")
    for r, res in enumerate(results):
        for key in ("ws4", "ws2"):
            norm, grads = res[key]
            assert norm == GlobalNorm(num_seqs=7, num_tokens=28)
            for lt in LOSS_TYPES:
                torch.testing.assert_close(torch.tensor(grads[lt], dtype=F64), ref[lt], rtol=0, atol=1e-6,
                                           msg=f"rank {r} {key} {lt}")
    full = group_advantages(make_step()[6], G, "batch")[0]
    for a, b in ((0, 1), (2, 3)):
        got = torch.tensor(results[a]["batch_adv"] + results[b]["batch_adv"], dtype=F64)
        torch.testing.assert_close(got, full, rtol=0, atol=1e-12)
