"""GRPO's settings: TRL's names where TRL has one, so a TRL user's config reads the same here."""

from __future__ import annotations

from dataclasses import dataclass, field

from distlab.choices import Choice
from distlab.config import ModelSettings
from distlab.recipes.lm.config import LMRecipeConfig, ScaleRewards, SequenceLoss
from distlab.recipes.lm.envs.config import EnvConfig


class LrSchedule(Choice):
    """After ``warmup_steps`` of linear warm-up (TRL's ``lr_scheduler_type``)."""

    constant = "constant"
    linear = "linear"  # to 0 at ``steps``
    cosine = "cosine"  # to 0 at ``steps``


def _tests() -> list[str]:
    return ["tests"]


def _models() -> dict[str, ModelSettings]:
    return {"policy": ModelSettings(), "reference": ModelSettings(trainable=False)}


@dataclass
class AsyncConfig:
    """Overlapped, K-step off-policy GRPO (``async.*`` on the command line and in config files).

    ``off_policy_steps=K > 0``: the rollouts a step trains on were sampled K optimizer steps earlier, before the
    update of the step that sampled them, so their sandbox scoring runs while that update, the next reference pass
    and the next sampling do: the sampler and the sandbox no longer idle each other (issue 49). ``0`` is the
    synchronous loop, unchanged. Lagged rollouts are corrected per token by the truncated importance weight
    ``min(pi_train / pi_behaviour, importance_sampling_cap)`` (TRL's ``vllm_importance_sampling_cap``, verl's
    ``rollout_is_threshold``; 2.0 is both their defaults) on the policy-gradient term. ``rollout_ranks=R > 0``
    splits the job: its last R ranks only sample and score, the others only train (``split_roles.py``).
    """

    off_policy_steps: int = 0  # async.off_policy_steps=K: train on rollouts sampled K updates ago (0 = synchronous)
    importance_sampling_cap: float = 2.0  # async.is_cap: C in the token weight min(pi_train / pi_behaviour, C)
    # async.rollout_ranks=R: the job's last R ranks only sample and score rollouts, the others only train
    # (recipes/grpo/split_roles.py); 0 = every rank does both
    rollout_ranks: int = 0


@dataclass
class GRPOConfig(LMRecipeConfig):
    warmup_steps: int = 0
    lr_scheduler_type: LrSchedule = LrSchedule.constant
    beta: float = 0.04  # KL weight; 0 = no reference model is loaded
    epsilon_high: float = 0.0  # 0: same as epsilon (symmetric clipping)
    loss_type: SequenceLoss = SequenceLoss.grpo
    scale_rewards: ScaleRewards = ScaleRewards.group
    mask_truncated_completions: bool = False
    # rewards: sum_i reward_weights[i] * reward_funcs[i] (lm/reward_funcs.py):
    # tests | tests_fraction | format | overlong | module:fn
    reward_funcs: list[str] = field(default_factory=_tests)
    reward_weights: list[float] = field(default_factory=list)  # empty: every weight 1
    reward_timeout_s: float = 10.0  # per call of a user's reward function
    overlong_buffer: int = 64  # DAPO's soft overlong penalty starts this many tokens before the length limit
    entropy_coef: float = 0.0  # > 0: an entropy bonus, - entropy_coef x token entropy in the loss
    dynamic_sampling: bool = False  # DAPO: refill groups whose rewards all agree, up to max_refill_rounds times
    max_refill_rounds: int = 3
    # control arm: each step's rewards permuted across this rank's completions (seeded by run seed, step and rank)
    # before the advantages, so an update no longer knows which completion earned what; the gap between a run and
    # its control is what the reward taught, not what any update of this size does to pass rates
    shuffle_rewards: bool = False
    log_completions: int = 0  # every N steps, log this rank's sampled completions with their rewards (0 = off)
    models: dict[str, ModelSettings] = field(default_factory=_models)
    # multi-turn episodes (lm/envs): env.name=code_feedback|math_tool, env.max_turns=N; "" = one reply per prompt
    env: EnvConfig = field(default_factory=EnvConfig)
    # ``async`` is a Python keyword: the field is ``async_``, the keys users write are ``async.*`` (ALIASES)
    async_: AsyncConfig = field(default_factory=AsyncConfig)


ALIASES = {
    "--training_args.max_steps": "steps",
    "--training_args.learning_rate": "lr",
    "--training_args.per_device_train_batch_size": "micro_batch_size",
    "--training_args.gradient_accumulation_steps": "dist.grad_accum",
    "gradient_accumulation_steps": "dist.grad_accum",  # the field it was before dist.grad_accum served GRPO
    "--training_args.gradient_checkpointing": "model.gradient_checkpointing",
    "--evaluation.eval_interval_steps": "evaluation.eval_interval_steps",
    "async": "async_",  # a config file's ``async:`` block
    "async.off_policy_steps": "async_.off_policy_steps",
    "async.importance_sampling_cap": "async_.importance_sampling_cap",
    "async.is_cap": "async_.importance_sampling_cap",  # the short name issue 49 uses
    "async.rollout_ranks": "async_.rollout_ranks",
}
