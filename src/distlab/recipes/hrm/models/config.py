"""Architecture configuration for the recursive-reasoning recipes (field names follow HRM).

Defaults equal HRM's Sudoku-Extreme setting so that ``ArchConfig()`` reproduces the paper model.
For TRM, ``H_cycles`` is T (outer recursions) and ``L_cycles`` is n (latent updates per
recursion); ``L_layers`` is the depth of its single network.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

from distlab.errors import DistlabError, near_matches

ARCHS = ("hrm", "trm", "transformer")
ACT_MODES = ("q_learning", "halt_only", "fixed", "none")
POS_ENCODINGS = ("rope", "learned", "none")
# dtype names -> torch attribute names: torch is imported only when a model is built, so reading the config
# (``distlab train hrm --help``, ``--show-config``) stays fast
DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}
LOSS_TYPES = {"stablemax": "stablemax", "stablemax_cross_entropy": "stablemax",
              "softmax": "softmax", "softmax_cross_entropy": "softmax"}


@dataclass
class ArchConfig:
    name: str = "hrm"
    hidden_size: int = 512
    num_heads: int = 8
    expansion: float = 4.0
    H_cycles: int = 2
    L_cycles: int = 2
    H_layers: int = 4
    L_layers: int = 4
    num_layers: int = 8
    halt_max_steps: int = 16
    halt_exploration_prob: float = 0.1
    puzzle_emb_ndim: int = 512
    puzzle_emb_len: int = 0
    pos_encodings: str = "rope"
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    forward_dtype: str = "bfloat16"
    loss_type: str = "stablemax"
    act: str = "q_learning"
    mlp_t: bool = False
    fused_mixer: bool = True  # mlp_t's no-grad passes as one Triton kernel on CUDA (models/fused_mixer.py)
    ema_decay: float = 0.999
    # depth curriculum (HRM/TRM): H_cycles used by training step s of S, a pure function of s/S so a resume is
    # exact; "" = off (always H_cycles), "linear" = 1 -> H_cycles in equal parts of training,
    # "0:1,0.3:2,0.6:3" = from each fraction of training on, that many cycles. Evaluation uses H_cycles.
    curriculum: str = ""

    def __post_init__(self) -> None:
        self._check_choice("name", self.name, ARCHS)
        self._check_choice("act", self.act, ACT_MODES)
        self._check_choice("pos_encodings", self.pos_encodings, POS_ENCODINGS)
        self._check_choice("forward_dtype", self.forward_dtype, tuple(DTYPES))
        self._check_choice("loss_type", self.loss_type, tuple(LOSS_TYPES))
        if self.hidden_size % self.num_heads:
            raise DistlabError(f"arch.hidden_size={self.hidden_size} is not divisible by arch.num_heads="
                               f"{self.num_heads}; pick a head count that divides it")
        if (self.hidden_size // self.num_heads) % 2 and self.pos_encodings == "rope":
            raise DistlabError("arch.pos_encodings=rope needs an even head size (hidden_size / num_heads)")
        for key in ("H_cycles", "L_cycles", "halt_max_steps"):
            if getattr(self, key) < 1:
                raise DistlabError(f"arch.{key} must be >= 1, got {getattr(self, key)}")
        if self.puzzle_emb_ndim < 0 or self.puzzle_emb_len < 0:
            raise DistlabError("arch.puzzle_emb_ndim and arch.puzzle_emb_len must be >= 0")
        if self.puzzle_emb_len and self.puzzle_emb_len * self.hidden_size < self.puzzle_emb_ndim:
            raise DistlabError(f"arch.puzzle_emb_len={self.puzzle_emb_len} slots of {self.hidden_size} cannot hold "
                               f"puzzle_emb_ndim={self.puzzle_emb_ndim}; raise puzzle_emb_len or set it to 0 (auto)")
        if not 0.0 <= self.halt_exploration_prob <= 1.0:
            raise DistlabError("arch.halt_exploration_prob must lie in [0, 1]")
        if self.curriculum:
            if self.name == "transformer":
                raise DistlabError("arch.curriculum grows HRM's/TRM's cycles; arch.name=transformer has none")
            parse_curriculum(self.curriculum, self.H_cycles)

    @staticmethod
    def _check_choice(key: str, value: str, choices: tuple[str, ...]) -> None:
        if value not in choices:
            hint = near_matches(str(value), choices)
            raise DistlabError(f"arch.{key}={value!r} is not one of {', '.join(choices)}"
                               + (f" (did you mean {hint[0]!r}?)" if hint else ""))

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any] | ArchConfig) -> ArchConfig:
        """Build from a mapping (OmegaConf or dict); unknown keys are an error, not silently ignored."""
        if isinstance(cfg, ArchConfig):
            return cfg
        known = {f.name for f in dataclasses.fields(cls)}
        data = dict(cfg.items())
        for key in data:
            if key not in known:
                hint = near_matches(key, known)
                raise DistlabError(f"unknown arch key {key!r}" + (f"; did you mean {hint[0]!r}?" if hint else
                                                                   f"; valid keys: {', '.join(sorted(known))}"))
        return cls(**data)

    @property
    def dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, DTYPES[self.forward_dtype])

    @property
    def loss_kind(self) -> str:
        return LOSS_TYPES[self.loss_type]

    @property
    def prefix_len(self) -> int:
        """Sequence slots taken by the puzzle embedding (0 when it is disabled)."""
        if self.puzzle_emb_ndim == 0:
            return 0
        return self.puzzle_emb_len or -(self.puzzle_emb_ndim // -self.hidden_size)

    @property
    def segments(self) -> int:
        """Maximum ACT segments per example (1 without an outer loop)."""
        return 1 if self.act == "none" else self.halt_max_steps


def parse_curriculum(spec: str, max_cycles: int) -> list[tuple[float, int]]:
    """``arch.curriculum`` as ``[(from_fraction, cycles), ...]``, ascending, starting at 0."""
    if spec == "linear":
        return [(i / max_cycles, i + 1) for i in range(max_cycles)]
    points = []
    try:
        for part in spec.split(","):
            frac, cycles = part.split(":")
            points.append((float(frac), int(cycles)))
    except ValueError:
        raise DistlabError(f"arch.curriculum={spec!r} is neither 'linear' nor a schedule like '0:1,0.3:2,0.6:3' "
                           "(fraction of training: H_cycles)") from None
    fracs = [f for f, _ in points]
    if fracs[0] != 0.0 or fracs != sorted(set(fracs)) or fracs[-1] >= 1.0:
        raise DistlabError(f"arch.curriculum={spec!r}: fractions must start at 0, rise strictly and stay below 1")
    if any(not 1 <= c <= max_cycles for _, c in points):
        raise DistlabError(f"arch.curriculum={spec!r}: cycles must lie in 1..arch.H_cycles={max_cycles} "
                           "(evaluation runs H_cycles)")
    return points


def curriculum_cycles(spec: str, max_cycles: int, step: int, total_steps: int) -> int:
    """H_cycles for the optimizer step ``step`` (0-based) of ``total_steps``; ``max_cycles`` when off."""
    if not spec:
        return max_cycles
    frac = step / max(total_steps, 1)
    cycles = max_cycles
    for start, c in parse_curriculum(spec, max_cycles):
        if frac >= start:
            cycles = c
    return cycles


@dataclass(frozen=True)
class DataShape:
    """The data-set facts a model needs (from the loader's metadata)."""

    vocab_size: int
    seq_len: int
    num_puzzle_identifiers: int

    @classmethod
    def from_metadata(cls, metadata: Any) -> DataShape:
        def read(key: str) -> int:
            if isinstance(metadata, Mapping):
                if key not in metadata:
                    raise DistlabError(f"dataset metadata lacks {key!r}; rebuild the dataset with the distlab builder")
                return int(metadata[key])
            if not hasattr(metadata, key):
                raise DistlabError(f"dataset metadata lacks {key!r}; rebuild the dataset with the distlab builder")
            return int(getattr(metadata, key))
        return cls(read("vocab_size"), read("seq_len"), read("num_puzzle_identifiers"))
