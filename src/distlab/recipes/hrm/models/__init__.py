"""HRM, TRM and transformer reasoning models with ACT and sparse puzzle embeddings.

The names below load on first use (PEP 562), so importing :mod:`.config` for a recipe's schema (help,
``--show-config``) does not import torch and every model module with it.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"ACTCarry": ".act", "ACTModel": ".act", "build_model": ".build", "ArchConfig": ".config",
          "DataShape": ".config", "EMA": ".ema", "ACTLossHead": ".loss", "softmax_cross_entropy": ".loss",
          "stablemax_cross_entropy": ".loss", "SparsePuzzleEmbedding": ".puzzle_emb"}

__all__ = ["ACTCarry", "ACTLossHead", "ACTModel", "ArchConfig", "DataShape", "EMA", "SparsePuzzleEmbedding",
           "build_model", "softmax_cross_entropy", "stablemax_cross_entropy"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
