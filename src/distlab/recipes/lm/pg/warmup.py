"""A short supervised warm-up on reference solutions, for tiny models trained from scratch.

A randomly initialised model never writes a passing program, so every RL group has zero reward
variance and nothing to learn from. A few supervised steps bring it to a low but non-zero pass rate;
the starting evaluation is taken *after* the warm-up, so any gain reported is RL's own.

``pack`` solved problems go back to back in one sequence. A SCoRe episode is about three
problem-lengths long, and a tiny model from scratch never generalises to positions it was not trained
at; packing unrelated problems trains those positions without ever showing a second attempt, so
whatever turn 2 learns about self-correction it learns from RL. ``pack=1`` is one problem per sequence.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from distlab.recipes.lm.pg.batching import sequences
from distlab.recipes.lm.pg.logprobs import logprobs
from distlab.recipes.lm.tasks import Task, text_completion, text_prompt
from distlab.training.amp import MixedPrecision

log = logging.getLogger("distlab")


def _encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"] if text else []


def _packed_row(tok, tasks: list[Task], picks: list[int]) -> tuple[list[int], list[int]]:
    """``(context ids, target ids)`` of one sequence: every problem's prompt and solution, solutions scored."""
    ids: list[int] = []
    target: list[int] = []
    for j, i in enumerate(picks):
        p = _encode(tok, ("\n" if j else "") + text_prompt(tasks[i]))
        c = _encode(tok, text_completion(tasks[i]))
        ids += p + c
        target += [0] * len(p) + [1] * len(c)
    return ids, target


def supervised_warmup(session, policy: nn.Module, tok, tasks: list[Task], *, steps: int, lr: float, per_rank: int,
                      pack: int, seed: int, chunk_tokens: int) -> float:
    """``steps`` steps of next-token loss on ``per_rank`` sequences a rank; returns the last loss."""
    rt = session.rt
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=lr)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    g = torch.Generator().manual_seed(seed + 17)
    loss_value = float("nan")
    amp = MixedPrecision.of(session)
    for step in range(steps):
        order = torch.randint(len(tasks), (per_rank * rt.world_size, pack), generator=g)
        rows = [_packed_row(tok, tasks, picks.tolist()) for picks in order[rt.rank::rt.world_size]]
        ids, attn, _ = sequences([r[0] for r in rows], [[] for _ in rows], pad, torch.device("cpu"))
        target = torch.zeros_like(attn, dtype=torch.bool)
        for k, (_, t) in enumerate(rows):
            target[k, :len(t)] = torch.tensor(t, dtype=torch.bool)
        logp, _ = logprobs(policy, ids, attn, target, chunk_tokens=chunk_tokens)
        loss = -(logp.sum() / target[:, 1:].sum().clamp(min=1).to(logp.device))
        amp.backward(loss)  # DDP averages the ranks' per-token means: equal shares of an equal batch
        amp.step(opt, policy, 1.0)  # clipped to 1; with fp16 skipped on inf/NaN gradients
        opt.zero_grad(set_to_none=True)
        loss_value = float(loss.detach())
        if (step + 1) % max(1, steps // 5) == 0 and rt.is_main:
            log.info("warm-up %d/%d: loss %.3f", step + 1, steps, loss_value)
    session.metrics.log(0, {"sft_loss": loss_value, "sft_steps": steps, "sft_pack": pack}, split="warmup")
    return loss_value
