"""Configuration of the HRM/TRM recipe; names follow HRM's ``pretrain.py`` where they overlap."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from distlab.config import BaseConfig
from distlab.recipes.hrm.models.config import ArchConfig


@dataclass
class DataConfig:
    path: str = ""  # an HRM-format dataset dir; empty = derived from the build settings below
    build: str = "none"  # sudoku | maze | arc | none: build the dataset first if it is missing
    source: str = "generate"  # builder source (generate, a CSV/txt path, arc1, arc2, a folder)
    train_size: int = 1000
    test_size: int = 1000
    num_aug: int = 0
    blanks: int = 0  # sudoku only: exactly this many blanks (easy puzzles for CPU demos); 0 = minimal puzzles
    min_difficulty: float = -1.0  # sudoku: search effort floor (-1 = builder default); maze: min path length
    seed: int = 0
    workers: int = 2
    eval_limit: int = 0  # evaluate on the first N test examples only (0 = all)
    interim_eval_limit: int = 0  # evaluations during training use the first N (cheap learning curves); 0 = as final

    def resolved_path(self) -> Path:
        if self.path:
            return Path(self.path)
        parts = [self.build, f"n{self.train_size}", f"t{self.test_size}", f"aug{self.num_aug}", f"s{self.seed}"]
        if self.blanks:
            parts.append(f"b{self.blanks}")
        if self.min_difficulty >= 0:
            parts.append(f"d{self.min_difficulty:g}")
        if self.source != "generate":
            parts.append(Path(self.source).stem)
        return Path("data") / "-".join(parts)


SELECTIONS = ("q", "vote")
NOISE_MODES = ("init", "latent")


@dataclass
class EvalConfig:
    """Test-time sampling: ``samples`` trajectories per puzzle, one answer chosen per puzzle.

    Trajectory 0 is today's noise-free evaluation (so ``samples=1`` is exactly it); trajectories 1..K-1 add
    Gaussian noise to the initial latent state (``noise=init``) or to the carried latent before every segment
    (``noise=latent``), ``noise_scale`` times unit variance. ``select=q`` keeps the trajectory whose final
    q_halt logit (the halting head's "this answer is right") is highest; ``select=vote`` the most frequent
    decoded answer (ties: the highest q_halt among the tied answers). Ties fall to the lower trajectory.
    """

    samples: int = 1
    select: str = "q"  # q | vote
    noise: str = "init"  # init | latent
    noise_scale: float = 0.1
    seed: int = 0  # noise seed (added to run.seed)
    # more datasets whose test splits the final evaluation (training's last one and `distlab eval`) scores after
    # data.path's, with the same settings, in the same process; each must be readable by the model (eval_data.py)
    also: list[str] = field(default_factory=list)


@dataclass
class HRMConfig(BaseConfig):
    data: DataConfig = field(default_factory=DataConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    arch: ArchConfig = field(default_factory=ArchConfig)
    global_batch_size: int = 768
    steps: int = 0  # total optimizer steps; 0 = derived from epochs
    epochs: float = 1.0  # passes over the training set as HRM counts them (used when steps=0), see sampling
    # groups: an epoch visits every group (original puzzle) once through one random augmentation, as HRM and TRM
    # (epoch = total_groups x mean_puzzle_examples examples); examples: every stored example once (before 2026-11)
    sampling: str = "groups"
    optimizer: str = "adam_atan2"  # adam_atan2 | adamw
    lr: float = 1e-4
    lr_min_ratio: float = 1.0
    lr_warmup_steps: int = 2000
    beta1: float = 0.9
    beta2: float = 0.95
    weight_decay: float = 0.1
    puzzle_emb_lr: float = 1e-2
    puzzle_emb_weight_decay: float = 0.1
    clip_grad: float = 0.0  # 0 = off (HRM does not clip)
    ema: bool = False  # evaluate with an exponential moving average of the weights (TRM)
    ema_warmup: bool = True  # EMA rate min(decay, (1+n)/(10+n)) at update n; false = TRM's fixed rate from step 0
    eval_every: int = 0  # steps between evaluations; 0 = only at the end
    save_predictions: bool = True
