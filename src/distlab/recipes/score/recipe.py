"""The ``score`` recipe: BiLevel SCoRe, two-turn self-correction RL for code (seed 004).

Launch paths, all one code path (``distlab.worker``): ``distlab train score --procs N`` (CPU, gloo) or
``--gpus N``; ``torchrun --nproc-per-node N -m distlab.worker score key=value ...``; and
``accelerate launch --multi_gpu --num_processes N -m distlab.worker score key=value ...`` (accelerate sets
RANK and WORLD_SIZE, which the core reads; on a CPU-only machine add ``dist.device=cpu dist.backend=gloo``,
since accelerate's ``--cpu`` flag starts a single process). The seed's two-GPU map is::

    distlab train score --gpus 2 dist.devices_per_rank=2 guidance=trained advantage=critic \
        placement.policy=cuda:0 placement.critic=cuda:0 placement.guidance=cuda:1 placement.value=cuda:1 \
        placement.reference=cpu placement.target_critic=cpu

``distlab doctor --recipe score <the same overrides>`` estimates memory per device first.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from distlab.errors import DistlabError
from distlab.recipe import ModelSpec, Recipe
from distlab.recipes.lm.settings import check_checkpointing
from distlab.recipes.score.config import (ADVANTAGES, GUIDANCE_MODES, KL_ESTIMATORS, LOSS_TYPES, MODEL_NAMES,
                                          SCALE_REWARDS, ScoreConfig, beta2_of, effective_models, guidance_config,
                                          used_models)

PRESETS = Path(__file__).parent / "presets"
log = logging.getLogger("distlab")


def train(cfg: ScoreConfig, session) -> dict:
    from distlab.recipes.score.train import train as run

    return run(cfg, session)


def check(cfg: ScoreConfig, world_size: int) -> None:
    """Settings that cannot work together, named before any process starts."""
    from distlab.recipes.score.schedule import parse_schedule

    for key, value, allowed in (("guidance", cfg.guidance, GUIDANCE_MODES), ("advantage", cfg.advantage, ADVANTAGES),
                                ("scale_rewards", cfg.scale_rewards, SCALE_REWARDS),
                                ("loss_type", cfg.loss_type, LOSS_TYPES), ("kl", cfg.kl, KL_ESTIMATORS),
                                ("model.prompt_mode", cfg.model.prompt_mode, ("chat", "text")),
                                ("guidance_prompt_mode", cfg.guidance_prompt_mode, ("", "chat", "text")),
                                ("sampling.backend", cfg.sampling.backend, ("static", "hf"))):
        if value not in allowed:
            shown = ", ".join(repr(a) for a in allowed)
            raise DistlabError(f"{key}={value!r} is not one of {shown}")
    parse_schedule(cfg.stage_schedule)
    positive = {"steps": cfg.steps, "prompts_per_step": cfg.prompts_per_step, "micro_batch_size": cfg.micro_batch_size,
                "num_iterations": cfg.num_iterations, "critic_updates": cfg.critic_updates,
                "critic_hidden": cfg.critic_hidden, "guidance_every": cfg.guidance_every,
                "hint_max_tokens": cfg.hint_max_tokens, "sft_pack": cfg.sft_pack, "sft_batch_size": cfg.sft_batch_size,
                "sampling.max_completion_length": cfg.sampling.max_completion_length}
    for key, value in positive.items():
        if value < 1:
            raise DistlabError(f"{key}={value} must be 1 or more")
    if cfg.num_generations < 2:
        raise DistlabError(f"num_generations={cfg.num_generations}: the group baseline (and the guidance's) needs "
                           f"2 or more turn-1 samples per prompt")
    for key, value in (("lr", cfg.lr), ("critic_lr", cfg.critic_lr), ("guidance_lr", cfg.guidance_lr)):
        if value <= 0:
            raise DistlabError(f"{key}={value} must be > 0")
    for key, value in (("beta1", cfg.beta1), ("beta2", beta2_of(cfg)), ("alpha", cfg.alpha),
                       ("hint_len_penalty", cfg.hint_len_penalty), ("hint_leak_penalty", cfg.hint_leak_penalty)):
        if value < 0:
            raise DistlabError(f"{key}={value} must be >= 0")
    if not 0 < cfg.epsilon < 1 or not 0 <= cfg.tau <= 1 or not 0 <= cfg.gamma <= 1:
        raise DistlabError(f"need 0 < epsilon < 1, 0 <= tau <= 1 and 0 <= gamma <= 1 (got epsilon={cfg.epsilon}, "
                           f"tau={cfg.tau}, gamma={cfg.gamma})")
    if cfg.prompts_per_step % world_size:
        raise DistlabError(f"prompts_per_step={cfg.prompts_per_step} does not split over {world_size} ranks; use a "
                           f"multiple of {world_size}")
    check_models(cfg)
    if cfg.hint_sees_execution and cfg.guidance == "none":
        raise DistlabError("hint_sees_execution=true gives the guidance model turn 1's test result, but guidance=none "
                           "loads none; set guidance=frozen or guidance=trained")
    if cfg.sft_steps > 0 and (cfg.model.prompt_mode != "text" or cfg.model.lora_r > 0):
        raise DistlabError("sft_steps > 0 (the supervised warm-up for tiny models) needs model.prompt_mode=text and "
                           "model.lora_r=0")
    if cfg.advantage == "critic" and cfg.scale_rewards != "none":
        log.warning("scale_rewards=%s applies to advantage=mc only; the critic's advantages are not rescaled",
                    cfg.scale_rewards)


def check_models(cfg: ScoreConfig) -> None:
    """The six models exist, each is trained or frozen as its role needs, and unused ones are said to be unused."""
    for what, d in (("models", cfg.models), ("placement", cfg.placement)):
        missing = [n for n in MODEL_NAMES if n not in d]
        if missing:
            raise DistlabError(f"{what} lacks {', '.join(missing)}; this recipe's models are {', '.join(MODEL_NAMES)}")
    for name in ("policy", "critic", "value"):
        if not cfg.models[name].trainable:
            raise DistlabError(f"models.{name}.trainable=false: the {name} is what this recipe trains; keep it true")
    for name, why in (("reference", "the KL anchor must not move"),
                      ("target_critic", "it follows the critic by soft updates (tau), never by gradients")):
        if cfg.models[name].trainable:
            raise DistlabError(f"models.{name}.trainable=true: {why}; keep it false")
    if cfg.models["guidance"].trainable and cfg.guidance != "trained":
        raise DistlabError(f"models.guidance.trainable=true but guidance={cfg.guidance}: the guidance key decides "
                           f"whether the guidance model trains; set guidance=trained")
    if cfg.guidance != "none" and cfg.placement["guidance"].strip().lower() == "offload":
        if cfg.guidance == "trained":
            raise DistlabError("placement.guidance=offload streams weights per use and needs a frozen model; "
                               "guidance=trained trains it: use cpu, device or cuda:N")
        raise DistlabError("placement.guidance=offload would copy every layer's weights to the GPU once per generated "
                           "hint token; use cpu, device or cuda:N (offload suits the reference, which only scores)")
    used = used_models(cfg)
    for name in MODEL_NAMES:
        if name not in used and cfg.placement[name].strip().lower() != "device":
            log.warning("placement.%s=%s is unused: these options (guidance=%s, advantage=%s, beta1=%s, beta2=%s) load "
                        "no %s model", name, cfg.placement[name], cfg.guidance, cfg.advantage, cfg.beta1,
                        beta2_of(cfg), name)


def validate(cfg: ScoreConfig, world_size: int) -> None:
    from distlab.recipes.lm.model_source import resolve_source
    from distlab.recipes.lm.tasks_for import check_task_data

    check(cfg, world_size)
    resolve_source(cfg.model.source)  # a bad source fails here, before any rank loads it
    check_task_data(cfg.task)  # missing MBPP files too
    check_checkpointing(cfg)
    if cfg.guidance != "none" and cfg.guidance_source:
        resolve_source(cfg.guidance_source)


def evaluate_checkpoint(cfg: ScoreConfig, session, ckpt: Path) -> dict:
    from distlab.recipes.score.evaluate import evaluate_checkpoint as run

    return run(cfg, session, ckpt)


def head_params(width: int, hidden: int) -> int:
    """Parameters of one :class:`~.critic.TwinHead` (two 3-layer MLPs), counted without building it."""
    one = width * hidden + hidden + hidden * hidden + hidden + hidden + 1
    return 2 * one


def model_spec(cfg: ScoreConfig) -> list[ModelSpec]:
    """One spec per model these options load, each at its placement, for ``distlab doctor --recipe score``."""
    from distlab.recipes.lm.memory import lm_specs, shape

    names = used_models(cfg)
    episodes = max(1, cfg.prompts_per_step * cfg.num_generations)
    # an episode holds two turns, a hint and the instruction: size sequences for that, not one completion
    long = replace(cfg.sampling, max_completion_length=2 * cfg.sampling.max_completion_length + cfg.hint_max_tokens + 64)
    eff = replace(cfg, models=effective_models(cfg), sampling=long)
    specs = lm_specs(eff, [n for n in ("policy", "reference") if n in names], episodes)
    if "guidance" in names:
        gcfg = guidance_config(cfg)
        hint = replace(cfg.sampling, max_completion_length=cfg.hint_max_tokens + cfg.sampling.max_completion_length)
        specs += lm_specs(replace(gcfg, sampling=hint), ["guidance"], episodes)
    if "critic" in names:
        width = shape(cfg.model.source)["hidden"]
        p = head_params(width, cfg.critic_hidden)
        act = 4 * 2 * (width + 2 * cfg.critic_hidden) * 2  # fp32 activations of two heads, two transitions
        bytes_of = {"fp32": 4, "bf16": 2, "fp16": 2}
        for name, params, trained in (("critic", p, True), ("value", p, True), ("target_critic", 2 * p, False)):
            s = cfg.models[name]
            specs.append(ModelSpec(name, params, trainable_params=params if trained else 0,
                                   activation_bytes_per_example=act if trained else 0,
                                   batch_per_device=episodes if trained else 1,
                                   param_dtype_bytes=bytes_of[s.dtype], optimizer="adamw" if trained else "none",
                                   placement=cfg.placement.get(name, "device"),
                                   wrap=str(getattr(s.wrap, "value", s.wrap))))
    return specs


RECIPE = Recipe(name="score", config=ScoreConfig, train=train, presets_dir=PRESETS, batch_keys=("prompts_per_step",),
                lr_keys=("lr",), validate=validate, evaluate=evaluate_checkpoint, model_spec=model_spec,
                report_metrics=("acc_t1", "acc_t2", "delta_t1_t2"),
                supports=frozenset({"run.time_limit_s", "dist.wrap", "dist.compile",
                                    "dist.compile_mode", "dist.activation_checkpointing",
                                    "dist.comm_hook", "optim.state_dtype"}))
