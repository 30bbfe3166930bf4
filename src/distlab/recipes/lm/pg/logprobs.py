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
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from distlab.recipes.lm.models.parts import position_ids_from_mask, unwrap_model
from distlab.training.placement import compute_device

# Architectures that transform logits after the LM head; the chunked head would skip that step.
_POST_HEAD_CONFIG_KEYS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


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
                  with_entropy: bool | Literal["grad"]) -> torch.Tensor:
    """[n, 1 or 2]: log p(target) and optionally the entropy, for n hidden rows, logits in fp32."""
    logits = type(head).forward(head, hidden).float()  # the class's forward: ours is swapped out
    if temperature != 1.0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets[:, None]).squeeze(-1) - logz
    if not with_entropy:
        return logp[:, None]
    if with_entropy != "grad":  # a statistic: no backward through a vocabulary-wide product per token
        logits, logz = logits.detach(), logz.detach()
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
    with_entropy: bool | Literal["grad"] = False,
    pack: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities ``logp[b, t] = log p(input_ids[b, t] | input_ids[b, :t])``, shape [B, T], fp32.

    Positions outside :func:`score_mask` (the first token, padding, the prompt when
    ``completion_mask``/``start`` is given) hold 0. ``entropy`` (same layout, of the distribution that
    predicted token t) is returned when ``with_entropy``, else ``None``; it is a statistic without gradient
    unless ``with_entropy="grad"`` (an entropy bonus in the loss), which spares the update's backward a
    vocabulary-wide product per token. ``temperature`` divides the
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
    if pack:
        rows = pack_rows(attention_mask)
        out = _scores(model, head, _to_packed(input_ids, rows, 0), _to_packed(mask, rows, False),
                      rows.attention_mask(getattr(cfg, "_attn_implementation", None)),
                      rows.positions, chunk_tokens, temperature, with_entropy)
        out = out[rows.row, rows.col].reshape(*input_ids.shape, -1) * attention_mask[..., None]
        return out[..., 0], _entropy(out, with_entropy)
    out = _scores(model, head, input_ids, mask, attention_mask, position_ids_from_mask(attention_mask), chunk_tokens,
                  temperature, with_entropy)
    return out[..., 0], _entropy(out, with_entropy)


def _entropy(out: torch.Tensor, with_entropy: bool | Literal["grad"]) -> torch.Tensor | None:
    if not with_entropy:
        return None
    return out[..., 1] if with_entropy == "grad" else out[..., 1].detach()


def _scores(model: nn.Module, head: nn.Module, input_ids: torch.Tensor, mask: torch.Tensor,
            attention_mask: torch.Tensor, position_ids: torch.Tensor, chunk_tokens: int, temperature: float,
            with_entropy: bool | Literal["grad"]) -> torch.Tensor:
    """[B, T, 1 or 2]: the model's forward with the chunked head over the ``mask``ed positions."""
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
        return model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
            logits_to_keep=0,
        ).logits


# the attentions that take a packed batch's mask (``padding_free=true``), each in its own form
# (:meth:`PackedRows.attention_mask`); lm/checks.py refuses any other, and the packing test runs every one of them
PACKING_ATTENTIONS = ("grouped_sdpa", "sdpa", "eager", "flex_attention")


@dataclass(frozen=True)
class PackedRows:
    """Where each token of a right-padded [B, T] batch sits in the packed [R, T] rows (R <= B)."""

    row: torch.Tensor  # [B * T] packed row of each (b, t); padding points at a padding slot
    col: torch.Tensor  # [B * T]
    positions: torch.Tensor  # [R, T] position within its own sequence
    doc: torch.Tensor  # [R, T] which sequence fills each slot (-1: an empty slot)
    real: torch.Tensor  # [B * T] bool: a real token, not padding

    @property
    def mask(self) -> torch.Tensor:
        """[R, 1, T, T] bool for SDPA/eager attention: causal and within one sequence (an empty slot sees itself)."""
        doc, width = self.doc, self.doc.shape[1]
        same = (doc[:, :, None] == doc[:, None, :]) & (doc[:, :, None] >= 0)
        eye = torch.eye(width, dtype=torch.bool, device=doc.device)
        return (torch.tril(same) | eye)[:, None]

    def additive_mask(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """:attr:`mask` as eager attention takes it: eager *adds* its mask to the scores, so a bool mask would add
        True = 1 and mask nothing; here 0 where a query may look and the dtype's most negative value elsewhere
        (finite, as transformers' own masks, so no row can turn into NaN). fp32 by default: bf16/fp16 scores
        plus this mask promote to fp32, which eager's softmax computes in anyway."""
        zero = torch.zeros((), dtype=dtype, device=self.doc.device)
        return torch.where(self.mask, zero, torch.finfo(dtype).min)

    def attention_mask(self, attn_implementation: str | None):
        """The packed mask in the form ``attn_implementation`` reads: a ``BlockMask`` for FlexAttention, an additive
        float mask for eager, the bool mask (True = attend) for SDPA, ``grouped_sdpa`` included."""
        if attn_implementation == "flex_attention":
            return self.block_mask()
        if attn_implementation == "eager":
            return self.additive_mask()
        return self.mask

    def block_mask(self):
        """The same mask as a FlexAttention ``BlockMask`` built from the document ids: the [R, T, T] tensor never
        exists, and blocks that cross sequences are skipped rather than computed and masked."""
        from torch.nn.attention.flex_attention import create_block_mask

        doc = self.doc

        def same_document(b, h, q, kv):
            return ((doc[b, q] == doc[b, kv]) & (kv <= q) & (doc[b, q] >= 0)) | (q == kv)

        r, t = doc.shape
        return create_block_mask(same_document, B=r, H=None, Q_LEN=t, KV_LEN=t, device=doc.device)


def pack_rows(attention_mask: torch.Tensor) -> PackedRows:
    """First-fit-decreasing packing of right-padded sequences into rows of the batch's width: the forward then
    spends nothing on padding but the rows' tails, and a block-diagonal causal mask keeps sequences apart."""
    lengths = attention_mask.long().sum(-1).tolist()
    b, width = attention_mask.shape
    if not bool((torch.arange(width, device=attention_mask.device)[None, :] < attention_mask.sum(-1, keepdim=True)
                 ).eq(attention_mask.bool()).all()):
        raise ValueError("packing needs right-padded rows (real tokens first)")
    free: list[int] = []  # columns left per packed row
    place = [(0, 0)] * b  # (packed row, first column) of each sequence
    for i in sorted(range(b), key=lambda i: -lengths[i]):
        r = next((r for r, room in enumerate(free) if room >= lengths[i]), len(free))
        if r == len(free):
            free.append(width)
        place[i] = (r, width - free[r])
        free[r] -= lengths[i]
    n, dev = len(free), attention_mask.device
    doc = torch.full((n, width), -1, dtype=torch.long)
    positions = torch.zeros((n, width), dtype=torch.long)
    row = torch.empty((b, width), dtype=torch.long)
    col = torch.empty((b, width), dtype=torch.long)
    for i, (r, c) in enumerate(place):
        length = lengths[i]
        doc[r, c:c + length] = i
        positions[r, c:c + length] = torch.arange(length)
        row[i], col[i, :length] = r, torch.arange(c, c + length)
        col[i, length:] = c + length - 1  # padding reads its sequence's last slot; the result is zeroed
    return PackedRows(row.reshape(-1).to(dev), col.reshape(-1).to(dev), positions.to(dev), doc.to(dev),
                      attention_mask.bool().reshape(-1))


def _to_packed(x: torch.Tensor, rows: PackedRows, fill) -> torch.Tensor:
    """``x`` [B, T] in the packed layout [R, T] (real tokens only); slots no token fills hold ``fill``."""
    out = x.new_full(rows.positions.shape, fill)
    out[rows.row[rows.real], rows.col[rows.real]] = x.reshape(-1)[rows.real]
    return out


def logprobs(model: nn.Module, ids: torch.Tensor, attn: torch.Tensor, mask: torch.Tensor, *, chunk_tokens: int,
             temperature: float = 1.0, entropy: bool | Literal["grad"] = False, pack: bool = False
             ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`token_logprobs` of ``mask``ed tokens for a placed model (wrapped, offloaded or on another device).

    Inputs go to where the model computes (:func:`~distlab.training.placement.compute_device`), gradients flow
    as enabled, and temperature 0 (greedy sampling) scores at temperature 1, the distribution a greedy
    rollout would be trained against. ``pack`` (``padding_free``) runs the sequences packed (:func:`pack_rows`).
    """
    dev = compute_device(model)
    return token_logprobs(model, ids.to(dev), attn.to(dev), completion_mask=mask.to(dev), chunk_tokens=chunk_tokens,
                          temperature=temperature if temperature > 0 else 1.0, with_entropy=entropy, pack=pack)
