"""Model factory: configuration + data-set metadata -> ACT-wrapped model with its loss head."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .act import ACTModel
from .base import RecurrentCore
from .config import ArchConfig, DataShape
from .hrm import HRMInner
from .loss import ACTLossHead
from .transformer import TransformerInner
from .trm import TRMInner

INNER_NETS: dict[str, type[RecurrentCore]] = {"hrm": HRMInner, "trm": TRMInner, "transformer": TransformerInner}

__all__ = ["ArchConfig", "DataShape", "build_model"]


def build_model(arch_cfg: Mapping[str, Any] | ArchConfig, metadata: Any) -> ACTLossHead:
    """Build the model named by ``arch_cfg.name`` for a data set described by ``metadata``.

    ``metadata`` is a mapping or object with ``vocab_size``, ``seq_len`` and
    ``num_puzzle_identifiers``. Parameters are created in float32 on the CPU; move with ``.to``.
    """
    cfg = ArchConfig.from_dict(arch_cfg)
    shape = DataShape.from_metadata(metadata)
    inner = INNER_NETS[cfg.name](cfg, shape)
    return ACTLossHead(ACTModel(inner, cfg.act, cfg.halt_max_steps, cfg.halt_exploration_prob), cfg.loss_kind)
