"""Choosing the next token from logits: greedy, temperature and nucleus (top-p) sampling.

Kept apart from the decode loop so the rule is testable on its own and identical wherever it is used.
Randomness comes only from the ``torch.Generator`` passed in, so a seed reproduces a rollout exactly
without touching the global RNG that training code relies on.
"""

from __future__ import annotations

import torch


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Logits with everything outside the smallest set of tokens of total probability >= ``top_p`` set to -inf.

    Same rule as HF's ``TopPLogitsWarper``: sort ascending, drop the prefix whose cumulative probability
    is <= 1 - top_p, always keep the most likely token.
    """
    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=False)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    drop = cumulative <= (1.0 - top_p)
    drop[..., -1] = False
    return logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))


def sample_next(logits: torch.Tensor, temperature: float, top_p: float = 1.0,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """Token ids [B] from fp32 logits [B, V]; ``temperature == 0`` means greedy (argmax).

    Sampling is the exponential race (``argmax p / E`` with ``E ~ Exp(1)``), which draws from exactly the
    categorical ``p`` as ``torch.multinomial`` does but cannot fail on the device: a row of non-finite logits
    yields some token instead of a CUDA assert that poisons the process. The decode loop checks
    :func:`nonfinite_rows` at its syncs and stops with a message that names the rows.
    """
    if temperature <= 0.0:
        return logits.argmax(dim=-1)
    scaled = top_p_filter(logits.float() / temperature, top_p)
    probs = scaled.softmax(dim=-1)
    race = torch.empty_like(probs).exponential_(generator=generator)
    return probs.div_(race).argmax(dim=-1)  # in place: one [B, V] tensor fewer per decode step


def nonfinite_rows(logits: torch.Tensor) -> torch.Tensor:
    """Bool [B]: rows holding an inf or NaN logit, which no sampling rule can turn into a distribution.

    Checked on every decode step, so one read of the logits: a row's sum is finite exactly when every logit is
    (no [B, V] mask is written; a model's logits are far too small for their sum to overflow)."""
    return ~torch.isfinite(logits.sum(dim=-1))
