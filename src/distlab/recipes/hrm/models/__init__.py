"""HRM, TRM and transformer reasoning models with ACT and sparse puzzle embeddings."""

from .act import ACTCarry, ACTModel
from .build import build_model
from .config import ArchConfig, DataShape
from .ema import EMA
from .loss import ACTLossHead, softmax_cross_entropy, stablemax_cross_entropy
from .puzzle_emb import SparsePuzzleEmbedding

__all__ = ["ACTCarry", "ACTLossHead", "ACTModel", "ArchConfig", "DataShape", "EMA", "SparsePuzzleEmbedding",
           "build_model", "softmax_cross_entropy", "stablemax_cross_entropy"]
