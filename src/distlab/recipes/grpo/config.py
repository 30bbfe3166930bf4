"""GRPO's settings: TRL's names where TRL has one, so a TRL user's config reads the same here."""

from __future__ import annotations

from dataclasses import dataclass, field

from distlab.placement import ModelSettings
from distlab.recipes.lm.pg_loss import ScaleRewards, SequenceLoss
from distlab.recipes.lm.settings import LMRecipeConfig


def _models() -> dict[str, ModelSettings]:
    return {"policy": ModelSettings(), "reference": ModelSettings(trainable=False)}


@dataclass
class GRPOConfig(LMRecipeConfig):
    warmup_steps: int = 0
    beta: float = 0.04  # KL weight; 0 = no reference model is loaded
    epsilon_high: float = 0.0  # 0: same as epsilon (symmetric clipping)
    loss_type: SequenceLoss = SequenceLoss.grpo
    scale_rewards: ScaleRewards = ScaleRewards.group
    mask_truncated_completions: bool = False
    models: dict[str, ModelSettings] = field(default_factory=_models)


ALIASES = {
    "--training_args.max_steps": "steps",
    "--training_args.learning_rate": "lr",
    "--training_args.per_device_train_batch_size": "micro_batch_size",
    "--training_args.gradient_accumulation_steps": "dist.grad_accum",
    "gradient_accumulation_steps": "dist.grad_accum",  # the field it was before dist.grad_accum served GRPO
    "--training_args.gradient_checkpointing": "model.gradient_checkpointing",
    "--evaluation.eval_interval_steps": "evaluation.eval_interval_steps",
}
