"""Tiny configurations and batches shared by the HRM-model tests."""

from __future__ import annotations

import torch

from distlab.recipes.hrm.models import build_model

METADATA = {"vocab_size": 11, "seq_len": 16, "num_puzzle_identifiers": 7}


def tiny_cfg(name: str = "hrm", **over: object) -> dict:
    cfg = dict(name=name, hidden_size=32, num_heads=4, expansion=2.0, H_cycles=2, L_cycles=2, H_layers=1,
               L_layers=1, num_layers=2, halt_max_steps=3, halt_exploration_prob=0.0, puzzle_emb_ndim=40,
               forward_dtype="float32", loss_type="stablemax", act="fixed")
    cfg.update(over)
    return cfg


def tiny_model(name: str = "hrm", seed: int = 0, **over: object) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(tiny_cfg(name, **over), METADATA)


def make_batch(size: int = 4, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    inputs = torch.randint(1, METADATA["vocab_size"], (size, METADATA["seq_len"]), generator=g)
    labels = torch.randint(1, METADATA["vocab_size"], (size, METADATA["seq_len"]), generator=g)
    labels[:, :3] = -100
    ids = torch.randint(0, METADATA["num_puzzle_identifiers"], (size,), generator=g)
    return {"inputs": inputs, "labels": labels, "puzzle_identifiers": ids}
