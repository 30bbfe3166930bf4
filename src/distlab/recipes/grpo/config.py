"""GRPO's settings: TRL's names where TRL has one, so a TRL user's config reads the same here."""

from __future__ import annotations

from dataclasses import dataclass, field

from distlab.config import BaseConfig
from distlab.placement import ModelSettings
from distlab.recipes.lm.sandbox import SandboxConfig
from distlab.recipes.lm.settings import EvalConfig, ModelConfig, SamplingConfig, TaskConfig

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
SCALE_REWARDS = ("group", "batch", "none")
KL_ESTIMATORS = ("k1", "k2", "k3")


def _placement() -> dict[str, str]:
    return {"policy": "device", "reference": "device"}


def _models() -> dict[str, ModelSettings]:
    return {"policy": ModelSettings(), "reference": ModelSettings(trainable=False)}


@dataclass
class GRPOConfig(BaseConfig):
    steps: int = 100  # rollout steps (alias --training_args.max_steps)
    prompts_per_step: int = 8  # global: prompts sampled per step, split over ranks (G completions each)
    num_generations: int = 8  # G: completions per prompt, all on the prompt's rank
    micro_batch_size: int = 8  # completions per forward/backward (alias per_device_train_batch_size)
    gradient_accumulation_steps: int = 0  # 0: as many micro-steps as the rank's completions need; else checked
    lr: float = 1e-6  # alias --training_args.learning_rate
    warmup_steps: int = 0
    weight_decay: float = 0.0
    clip_grad: float = 1.0
    beta: float = 0.04  # KL weight; 0 = no reference model is loaded
    kl: str = "k3"  # k1 | k2 | k3
    epsilon: float = 0.2
    epsilon_high: float = 0.0  # 0: same as epsilon (symmetric clipping)
    loss_type: str = "grpo"  # grpo | bnpo | dr_grpo | dapo
    scale_rewards: str = "group"  # group | batch | none
    num_iterations: int = 1  # policy updates per rollout (mu)
    mask_truncated_completions: bool = False
    logprob_chunk: int = 1024  # tokens per LM-head chunk when computing log-probs
    sft_steps: int = 0  # supervised warm-up steps on reference solutions before GRPO (tiny models only)
    sft_lr: float = 3e-3
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    evaluation: EvalConfig = field(default_factory=EvalConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    placement: dict[str, str] = field(default_factory=_placement)
    models: dict[str, ModelSettings] = field(default_factory=_models)


ALIASES = {
    "--training_args.max_steps": "steps",
    "--training_args.learning_rate": "lr",
    "--training_args.per_device_train_batch_size": "micro_batch_size",
    "--training_args.gradient_accumulation_steps": "gradient_accumulation_steps",
    "--training_args.gradient_checkpointing": "model.gradient_checkpointing",
    "--evaluation.eval_interval_steps": "evaluation.eval_interval_steps",
}
