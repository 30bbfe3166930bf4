"""Settings checks every LM recipe makes before any process starts (a recipe adds its own on top)."""

from __future__ import annotations

from typing import Any

from distlab.errors import DistlabError
from distlab.recipes.lm.config import EvalConfig, SamplingConfig, check_checkpointing
from distlab.recipes.lm.models.source import check_model_files, resolve_source
from distlab.recipes.lm.tasks.select import check_task_data


def check_groups(cfg: Any, world_size: int) -> None:
    """Groups of completions that can carry a signal and prompts that split evenly over the ranks."""
    if cfg.num_generations < 2:
        raise DistlabError(f"num_generations={cfg.num_generations}: a group of one has no baseline, so every "
                           f"advantage is 0; use 2 or more")
    if cfg.prompts_per_step % world_size:
        raise DistlabError(f"prompts_per_step={cfg.prompts_per_step} does not split over {world_size} ranks; use a "
                           f"multiple of {world_size}")
    if not 0 < cfg.epsilon < 1:
        raise DistlabError(f"epsilon={cfg.epsilon} must lie in (0, 1): it is the ratio clip, 0.2 is usual")


def check_kl(kl: str, weights: dict[str, float]) -> None:
    """``k1`` (-log ratio) estimates the KL without bias, but as a loss term its gradient is zero in expectation:
    E over samples of the policy of grad log pi is 0, so it would pull nothing back towards the reference."""
    weighted = {k: v for k, v in weights.items() if v > 0}
    if str(kl) == "k1" and weighted:
        keys = ", ".join(f"{k}={v}" for k, v in weighted.items())
        raise DistlabError(f"kl=k1 as a loss term ({keys}) has zero expected gradient, so it does not hold the "
                           f"policy near the reference; use kl=k3 (the default) or kl=k2, or set the weight to 0 "
                           f"to only measure the KL")


def check_sources(cfg: Any, *extra_sources: str) -> None:
    """Models, task data and recomputation settings that would fail inside every rank, named here instead."""
    for source in (cfg.model.source, *[s for s in extra_sources if s]):
        check_model_files(resolve_source(source), source)
    check_task_data(cfg.task)
    check_checkpointing(cfg)


def check_sampling(s: SamplingConfig) -> None:
    """Training samples G completions per prompt to compare them: greedy decoding gives G equal ones, no signal."""
    if not 0 < s.top_p <= 1:
        raise DistlabError(f"sampling.top_p={s.top_p} must lie in (0, 1]: the share of probability mass kept "
                           f"(1 = no nucleus filter)")
    if not s.temperature > 0 or s.temperature == float("inf"):
        raise DistlabError(f"sampling.temperature={s.temperature} must be above 0 and finite for training: at 0 "
                           f"(greedy) the G completions of a group are equal and every advantage is 0; "
                           f"evaluation is greedy anyway (evaluation.eval_temperature is for sampled pass@k)")
    if s.compact_rows and s.backend != "static":
        raise DistlabError(f"sampling.compact_rows=true shrinks the static backend's KV cache, and "
                           f"sampling.backend={s.backend} has none; use sampling.backend=static or drop compact_rows")


def check_evaluation(ev: EvalConfig) -> None:
    """pass@k needs k samples: each k lies in 1..samples."""
    if ev.samples < 1:
        raise DistlabError(f"evaluation.samples={ev.samples} must be 1 or more (1 = greedy pass@1 only)")
    if ev.eval_interval_steps < 0:
        raise DistlabError(f"evaluation.eval_interval_steps={ev.eval_interval_steps} must be 0 (before and after "
                           f"training only) or more")
    try:
        ks = [int(k) for k in str(ev.ks).split(",") if k.strip()]
    except ValueError:
        raise DistlabError(f"evaluation.ks={ev.ks!r} is not a comma-separated list of integers, e.g. 1,5") from None
    bad = [k for k in ks if not 1 <= k <= ev.samples]
    if not ks or bad:
        raise DistlabError(f"evaluation.ks={ev.ks}: pass@k needs 1 <= k <= evaluation.samples={ev.samples}; "
                           f"raise evaluation.samples to {max(ks or [1])} or drop k={bad or ks}")
    if ev.samples > 1 and not 0 < ev.eval_temperature < float("inf"):
        raise DistlabError(f"evaluation.eval_temperature={ev.eval_temperature} must be above 0 and finite when "
                           f"evaluation.samples={ev.samples} (sampled pass@k)")


def check_harness(cfg: Any) -> None:
    """The EvalPlus-style harness asks for programs and runs them: a set of math problems cannot be judged by it."""
    from distlab.recipes.lm.tasks.builtin import MATH_ALIASES

    if cfg.evaluation.harness == "evalplus" and cfg.task.eval in MATH_ALIASES:
        raise DistlabError(f"evaluation.harness=evalplus judges programs, and task.eval={cfg.task.eval} is a set of "
                           f"math problems; use evaluation.harness=distlab, or a code set (mbpp, humaneval)")


def check_roles(models: Any, trained: tuple[str, ...], frozen: dict[str, str]) -> None:
    """Each model trains or stays frozen as its role needs; ``frozen`` maps a name to why it must not move."""
    for name in trained:
        if name in models and not models[name].trainable:
            raise DistlabError(f"models.{name}.trainable=false: the {name} is what this recipe trains; keep it true")
    for name, why in frozen.items():
        if name in models and models[name].trainable:
            raise DistlabError(f"models.{name}.trainable=true: {why}; keep it false")


def check_settings(cfg: Any) -> None:
    """Values each LM recipe reads only inside a rank, checked once here: sampling, evaluation, the sandbox."""
    from distlab.recipes.lm.pg.logprobs import PACKING_ATTENTIONS
    from distlab.sandbox.config import check_sandbox

    check_sampling(cfg.sampling)
    check_evaluation(cfg.evaluation)
    check_harness(cfg)
    if cfg.padding_free and cfg.model.attn_implementation not in PACKING_ATTENTIONS:
        raise DistlabError(f"padding_free=true keeps packed sequences apart with a block-diagonal attention mask, "
                           f"which model.attn_implementation={cfg.model.attn_implementation} does not take; use "
                           f"{', '.join(PACKING_ATTENTIONS)}, or padding_free=false")
    check_attention(cfg)
    check_precision(cfg)
    check_sandbox(cfg.sandbox)


def check_precision(cfg: Any) -> None:
    """fp16 compute over bf16 weights (a model's sampling copy or frozen weights) mixes two 16-bit formats with
    different ranges in one forward: refused, as HRM refuses fp16 over a bf16 forward."""
    if cfg.dist.precision != "fp16":
        return
    for name, m in (getattr(cfg, "models", None) or {}).items():
        if m.dtype == "bf16":
            raise DistlabError(f"dist.precision=fp16 with models.{name}.dtype=bf16 would run the {name} in bf16 and "
                               f"fp16 at once; set models.{name}.dtype=fp16 (or fp32), or dist.precision=bf16")


def check_attention(cfg: Any) -> None:
    """A name transformers does not know fails inside every rank at load, and FlexAttention has no backward pass
    on the CPU (a CPU run would fail at its first update): both refused here, before any process starts."""
    import torch

    from distlab.recipes.lm.models.attention import attention_names

    name = cfg.model.attn_implementation
    known = attention_names()
    if name not in known:
        raise DistlabError(f"model.attn_implementation={name}: not an attention this transformers has; choose one "
                           f"of {', '.join(k for k in known if '|' not in k)}")
    on_cpu = cfg.dist.device == "cpu" or (cfg.dist.device == "auto" and not torch.cuda.is_available())
    if cfg.model.attn_implementation == "flex_attention" and on_cpu:
        raise DistlabError("model.attn_implementation=flex_attention trains only on a GPU (FlexAttention has no "
                           "backward on the CPU); use sdpa on the CPU")
