"""Per-token log-probabilities (and entropies) of given sequences, without materialising full logits.

GRPO and SCoRe need log p(token_t | tokens_<t) for every completion token under the policy, the old
policy and the reference model. The obvious ``model(ids).logits.log_softmax(-1)`` holds
batch x length x vocab fp32 values at once (64 rollouts x 1024 tokens x 49152 = 12.9 GB) and autograd
keeps them again for backward. Here the decoder runs once; only the hidden states of scored tokens are
sent through the LM head, ``chunk_tokens`` rows at a time, and in training each chunk is recomputed
in backward (activation checkpointing), so at most one chunk of logits exists at any moment.

The head is applied *inside* the model's own forward call (its ``forward`` is swapped for the
duration), not by calling the decoder and the head separately. That keeps the module call structure
intact, so wrappers that act at the root module's forward -- FSDP2's parameter all-gather, peft --
see an ordinary forward pass. Under FSDP2 the LM head must belong to the root unit (the case when only
decoder layers are sharded separately, and necessarily so with tied embeddings): the backward
recomputation of a chunk then finds the root's parameters still gathered.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from distlab.placement import compute_device
from distlab.recipes.lm.model_parts import unwrap_model

# Architectures that transform logits after the LM head; the chunked head would skip that step.
_POST_HEAD_CONFIG_KEYS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counting only real tokens (0 on padding): what HF ``generate`` uses for left padding.

    Scoring must use the same positions as sampling did, or the log-probs belong to another
    distribution.
    """
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.masked_fill(attention_mask == 0, 0)


def score_mask(
    attention_mask: torch.Tensor,
    completion_mask: torch.Tensor | None = None,
    start: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """Which positions get a log-prob: ``completion_mask`` if given, else positions ``>= start`` (an int
    or one index per row), else every real token; never position 0 (it has no context) or padding."""
    if completion_mask is not None:
        mask = completion_mask.bool() & attention_mask.bool()
    elif start is not None:
        t = torch.arange(attention_mask.shape[1], device=attention_mask.device)
        start_t = torch.as_tensor(start, device=attention_mask.device).reshape(-1, 1)
        mask = (t[None, :] >= start_t) & attention_mask.bool()
    else:
        mask = attention_mask.bool().clone()
    mask[:, 0] = False
    return mask


def _chunk_scores(head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float,
                  with_entropy: bool) -> torch.Tensor:
    """[n, 1 or 2]: log p(target) and optionally the entropy, for n hidden rows, logits in fp32."""
    logits = type(head).forward(head, hidden).float()  # the class's forward: ours is swapped out
    if temperature != 1.0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets[:, None]).squeeze(-1) - logz
    if not with_entropy:
        return logp[:, None]
    probs = torch.exp(logits - logz[:, None])
    entropy = logz - (probs * logits).sum(-1)
    return torch.stack([logp, entropy], dim=-1)


@contextmanager
def _head_replaced(head: nn.Module, fn):
    """Temporarily route calls of ``head`` to ``fn`` (an instance attribute shadows the class method)."""
    had_own = "forward" in head.__dict__
    saved = head.__dict__.get("forward")
    head.forward = fn
    try:
        yield
    finally:
        if had_own:
            head.forward = saved
        else:
            del head.forward


def token_logprobs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_mask: torch.Tensor | None = None,
    start: int | torch.Tensor | None = None,
    *,
    chunk_tokens: int = 1024,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities ``logp[b, t] = log p(input_ids[b, t] | input_ids[b, :t])``, shape [B, T], fp32.

    Positions outside :func:`score_mask` (the first token, padding, the prompt when
    ``completion_mask``/``start`` is given) hold 0. ``entropy`` (same layout, of the distribution that
    predicted token t) is returned when ``with_entropy``, else ``None``. ``temperature`` divides the
    logits first, matching sampling at that temperature. Gradients flow to the model's parameters
    when grad is enabled; the peak extra memory is one ``chunk_tokens x vocab`` block of logits.
    """
    base = unwrap_model(model)
    cfg = getattr(base, "config", None)
    for key in _POST_HEAD_CONFIG_KEYS:
        if getattr(cfg, key, None) not in (None, 1.0):
            raise NotImplementedError(
                f"{type(base).__name__} post-processes logits ({key}); chunked log-probs would be wrong")
    head = base.get_output_embeddings()
    mask = score_mask(attention_mask, completion_mask, start)
    sel = mask[:, 1:]  # the hidden state at t-1 predicts the token at t
    targets = input_ids[:, 1:][sel]
    n_out = 2 if with_entropy else 1
    recompute = torch.is_grad_enabled()

    def chunked_head(hidden: torch.Tensor) -> torch.Tensor:
        rows = hidden[:, :-1][sel]  # [N, d]: only the scored positions go through the head
        pieces = []
        for i in range(0, rows.shape[0], chunk_tokens):
            h, tgt = rows[i:i + chunk_tokens], targets[i:i + chunk_tokens]
            if recompute:
                pieces.append(checkpoint(_chunk_scores, head, h, tgt, temperature, with_entropy, use_reentrant=False))
            else:
                pieces.append(_chunk_scores(head, h, tgt, temperature, with_entropy))
        flat = torch.cat(pieces) if pieces else rows.new_zeros(0, n_out, dtype=torch.float32)
        out = flat.new_zeros(*sel.shape, n_out).masked_scatter(sel[..., None], flat)
        return torch.nn.functional.pad(out, (0, 0, 1, 0))  # position 0 has no prediction

    with _head_replaced(head, chunked_head):
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
            use_cache=False,
            logits_to_keep=0,
        ).logits
    return out[..., 0], (out[..., 1] if with_entropy else None)


def logprobs(model: nn.Module, ids: torch.Tensor, attn: torch.Tensor, mask: torch.Tensor, *, chunk_tokens: int,
             temperature: float = 1.0, entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`token_logprobs` of ``mask``ed tokens for a placed model (wrapped, offloaded or on another device).

    Inputs go to where the model computes (:func:`~distlab.placement.compute_device`), gradients flow
    as enabled, and temperature 0 (greedy sampling) scores at temperature 1, the distribution a greedy
    rollout would be trained against.
    """
    dev = compute_device(model)
    return token_logprobs(model, ids.to(dev), attn.to(dev), completion_mask=mask.to(dev), chunk_tokens=chunk_tokens,
                          temperature=temperature if temperature > 0 else 1.0, with_entropy=entropy)
