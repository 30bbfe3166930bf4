"""A short supervised warm-up on reference solutions, for tiny models trained from scratch.

A randomly initialised model never writes a passing program, so every GRPO group has zero reward
variance and nothing to learn from. A few supervised steps bring it to a low but non-zero pass rate;
the starting evaluation is taken *after* the warm-up, so any gain reported is GRPO's own.
"""

from __future__ import annotations

import logging

import torch

from distlab.recipes.lm.build import sequences
from distlab.recipes.lm.logprobs import token_logprobs
from distlab.recipes.lm.tasks import Task, text_completion, text_prompt
from distlab.wrap import clip_grad, unwrap

log = logging.getLogger("distlab")


def supervised_warmup(cfg, session, policy, tok, tasks: list[Task]) -> float:
    """``cfg.sft_steps`` steps of next-token loss on prompt -> reference completion; returns the last loss."""
    rt = session.rt
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.sft_lr)
    device = next(unwrap(policy).parameters()).device
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    g = torch.Generator().manual_seed(cfg.run.seed + 17)
    per_rank = max(1, cfg.micro_batch_size)
    loss_value = float("nan")
    for step in range(cfg.sft_steps):
        order = torch.randint(len(tasks), (per_rank * rt.world_size,), generator=g)
        mine = [tasks[int(i)] for i in order[rt.rank::rt.world_size]]
        prompts = [tok(text_prompt(t), add_special_tokens=False)["input_ids"] for t in mine]
        targets = [tok(text_completion(t), add_special_tokens=False)["input_ids"] for t in mine]
        ids, attn, comp = sequences(prompts, targets, pad, device)
        logp, _ = token_logprobs(policy, ids, attn, completion_mask=comp, chunk_tokens=cfg.logprob_chunk)
        tokens = comp[:, 1:].sum().clamp(min=1)
        loss = -(logp.sum() / tokens)
        loss.backward()  # DDP averages the ranks' per-token means: equal shares of an equal batch
        clip_grad(policy, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_value = float(loss.detach())
        if (step + 1) % max(1, cfg.sft_steps // 5) == 0 and rt.is_main:
            log.info("warm-up %d/%d: loss %.3f", step + 1, cfg.sft_steps, loss_value)
    session.metrics.log(0, {"sft_loss": loss_value, "sft_steps": cfg.sft_steps}, split="warmup")
    return loss_value
