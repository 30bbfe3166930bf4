"""A short supervised warm-up for tiny models: next-token loss on solved problems packed back to back.

GRPO's warm-up (``grpo/warmup.py``) trains on one problem per sequence. A SCoRe episode is about
three problem-lengths long (x, y1, the instruction and the problem again, y2), and a tiny model from
scratch never generalises to positions it was not trained at: its turn 2 is noise. Packing
``sft_pack`` unrelated solved problems into one sequence trains those positions without ever showing
a second attempt, an instruction or a correction, so whatever turn 2 learns about self-correction it
learns from RL. With ``sft_pack=1`` this is GRPO's warm-up.
"""

from __future__ import annotations

import logging

import torch

from distlab.recipes.lm.tasks import Task, text_completion, text_prompt
from distlab.recipes.score.episode import ROLE_PROMPT, ROLE_Y1, encode, pack
from distlab.recipes.score.logps import logprobs
from distlab.wrap import clip_grad, unwrap

log = logging.getLogger("distlab")


def packed_warmup(cfg, session, policy, tok, tasks: list[Task]) -> float:
    """``cfg.sft_steps`` steps on ``cfg.sft_batch_size`` sequences (global) of ``cfg.sft_pack`` problems each."""
    rt = session.rt
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=cfg.sft_lr)
    device = next(unwrap(policy).parameters()).device
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    g = torch.Generator().manual_seed(cfg.run.seed + 17)
    per_rank = max(1, cfg.sft_batch_size // rt.world_size)
    loss_value = float("nan")
    for step in range(cfg.sft_steps):
        order = torch.randint(len(tasks), (per_rank * rt.world_size, cfg.sft_pack), generator=g)
        rows, roles = [], []
        for picks in order[rt.rank::rt.world_size]:
            ids, role = [], []
            for j, i in enumerate(picks.tolist()):
                p = encode(tok, ("\n" if j else "") + text_prompt(tasks[i]))
                c = encode(tok, text_completion(tasks[i]))
                ids += p + c
                role += [ROLE_PROMPT] * len(p) + [ROLE_Y1] * len(c)
            rows.append(ids)
            roles.append(role)
        ids, attn, role = pack(rows, roles, pad, device)
        target = role == ROLE_Y1
        logp, _ = logprobs(policy, ids, attn, target, chunk_tokens=cfg.logprob_chunk)
        loss = -(logp.sum() / target[:, 1:].sum().clamp(min=1))
        loss.backward()  # DDP averages the ranks' per-token means: equal shares of an equal batch
        clip_grad(policy, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_value = float(loss.detach())
        if (step + 1) % max(1, cfg.sft_steps // 5) == 0 and rt.is_main:
            log.info("warm-up %d/%d: loss %.3f", step + 1, cfg.sft_steps, loss_value)
    session.metrics.log(0, {"sft_loss": loss_value, "sft_steps": cfg.sft_steps, "sft_pack": cfg.sft_pack},
                        split="warmup")
    return loss_value
