"""A tiny model learns a handful of fixed Sudoku-like sequences (loss falls, accuracy rises)."""

from __future__ import annotations

import pytest
import torch

from distlab.recipes.hrm.models import build_model
from distlab.recipes.hrm.optim import build_optimizers


def _latin_rows(n: int) -> dict[str, torch.Tensor]:
    """Rows of 4x4 Latin squares (digits 1..4, 0 = blank) with some cells hidden in the input."""
    g = torch.Generator().manual_seed(0)
    base = torch.tensor([[0, 1, 2, 3], [2, 3, 0, 1], [1, 0, 3, 2], [3, 2, 1, 0]])
    solutions = torch.stack([torch.randperm(4, generator=g)[base] + 1 for _ in range(n)]).view(n, 16)
    inputs = torch.where(torch.rand(n, 16, generator=g) < 0.5, 0, solutions)
    return {"inputs": inputs, "labels": solutions.clone(), "puzzle_identifiers": torch.arange(n) % 3}


# TRM's published Sudoku shape (MLP sequence mixing, T=3, n=6, 2 layers) is the case that once sat at chance:
# the sequence-mixing residual was normalised over features instead of positions.
TRM_MLP_T = dict(mlp_t=True, pos_encodings="none", L_layers=2, H_cycles=3, L_cycles=6)


# bf16 is how the GPU presets run; the recursion must still learn when every block computes in bf16
TRM_MLP_T_BF16 = dict(TRM_MLP_T, forward_dtype="bfloat16")


@pytest.mark.parametrize("name, over", [("hrm", {}), ("trm", {}), ("trm", TRM_MLP_T), ("trm", TRM_MLP_T_BF16)],
                         ids=["hrm", "trm", "trm-mlp_t-T3n6", "trm-mlp_t-T3n6-bf16"])
def test_tiny_model_overfits(name: str, over: dict) -> None:
    torch.manual_seed(0)
    cfg = dict(name=name, hidden_size=64, num_heads=4, expansion=2.0, H_layers=1, L_layers=1, H_cycles=2,
               L_cycles=2, puzzle_emb_ndim=16, forward_dtype="float32", act="none")
    cfg.update(over)
    model = build_model(cfg, {"vocab_size": 5, "seq_len": 16, "num_puzzle_identifiers": 3}).train()
    opts = build_optimizers(model, "adam_atan2", lr=3e-3, weight_decay=0.0, puzzle_emb_lr=1e-2)
    batch = _latin_rows(8)
    losses, accs = [], []
    for _ in range(40):
        _, loss, metrics, _, _ = model(model.initial_carry(batch), batch)
        (loss / 8).backward()
        for opt in opts:
            opt.step()
            opt.zero_grad()
        losses.append(metrics["lm_loss"].item() / 8)
        accs.append(metrics["accuracy"].item() / metrics["count"].item())
    assert losses[-1] < 0.3 * losses[0]
    assert accs[-1] > 0.85 and accs[-1] > accs[0] + 0.3
