"""Rows of token ids made into padded batches, and a batch cut into micro-batches."""

from __future__ import annotations

import torch


def sequences(prompt_ids: list[list[int]], completion_ids: list[list[int]], pad: int, device: torch.device,
              completion_masks: list[list[int] | None] | None = None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``prompt + completion`` rows, their attention mask and the mask of the trained tokens: every
    completion token, or where a row's ``completion_masks`` entry (one 0/1 per completion token; a multi-turn
    episode's policy tokens, not the environment's) says 1."""
    lengths = [len(p) + len(c) for p, c in zip(prompt_ids, completion_ids)]
    width = max(lengths)
    ids = torch.full((len(lengths), width), pad, dtype=torch.long)
    attn = torch.zeros((len(lengths), width), dtype=torch.long)
    comp = torch.zeros((len(lengths), width), dtype=torch.bool)
    masks = completion_masks or [None] * len(lengths)
    for i, (p, c, m) in enumerate(zip(prompt_ids, completion_ids, masks)):
        row = p + c
        ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        attn[i, :len(row)] = 1
        if m is None:
            comp[i, len(p):len(row)] = True
        else:
            if len(m) != len(c):
                raise ValueError(f"row {i}: {len(c)} completion tokens but a mask of {len(m)}")
            comp[i, len(p):len(row)] = torch.tensor(m, dtype=torch.bool)
    return ids.to(device), attn.to(device), comp.to(device)


def micro_batches(n: int, size: int, attn: torch.Tensor | None = None) -> list:
    """Consecutive slices of at most ``size`` rows covering ``n`` rows.

    With the (right-padded) attention mask ``attn``, each is a ``(rows, columns)`` pair that also cuts the
    padding columns beyond the micro-batch's own widest row: a batch padded to its longest sequence otherwise
    spends the forward and backward of every micro-batch on that one sequence's length.
    """
    rows = [slice(i, min(n, i + size)) for i in range(0, n, size)]
    if attn is None:
        return rows
    widths = attn.sum(dim=-1)
    return [(r, slice(0, int(widths[r].max()))) for r in rows]


def by_length(lengths: list[int]) -> torch.Tensor:
    """The row order that sorts sequences by length, so micro-batches hold sequences of similar width."""
    return torch.tensor(sorted(range(len(lengths)), key=lambda i: lengths[i]), dtype=torch.long)
