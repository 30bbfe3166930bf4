"""The ``score`` recipe: BiLevel SCoRe, two-turn self-correction RL for code (seed 004).

Launch paths, all one code path (``distlab.launch.worker``): ``distlab train score --procs N`` (CPU, gloo) or
``--gpus N``; ``torchrun --nproc-per-node N -m distlab.launch.worker score key=value ...``; and
``accelerate launch --multi_gpu --num_processes N -m distlab.launch.worker score key=value ...`` (accelerate sets
RANK and WORLD_SIZE, which the core reads; on a CPU-only machine add ``dist.device=cpu dist.backend=gloo``,
since accelerate's ``--cpu`` flag starts a single process). The seed's two-GPU map is::

    distlab train score --gpus 2 dist.devices_per_rank=2 guidance=trained advantage=critic \
        models.policy.placement=cuda:0 models.critic.placement=cuda:0 models.guidance.placement=cuda:1 \
        models.value.placement=cuda:1 models.reference.placement=cpu models.target_critic.placement=cpu

``distlab doctor --recipe score <the same overrides>`` estimates memory per device first.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from distlab.config import Placement, wrap_of
from distlab.errors import DistlabError
from distlab.recipe import ModelSpec, Recipe
from distlab.recipes.lm.config import LM_POSITIVE_KEYS, LM_SMOKE, LM_ZERO_MEANS
from distlab.recipes.lm.models.export import FORMATS as EXPORT_FORMATS
from distlab.recipes.lm.tasks.python_inputs import python_inputs
from distlab.recipes.score.config import (MODEL_NAMES, ScoreConfig, beta2_of, check_arm, effective_models,
                                          guidance_config, used_models)

PRESETS = Path(__file__).parent / "presets"
log = logging.getLogger("distlab")


def train(cfg: ScoreConfig, session) -> dict:
    from distlab.recipes.score.train import train as run

    return run(cfg, session)


def check(cfg: ScoreConfig, world_size: int) -> None:
    """Settings that cannot work together, named before any process starts."""
    from distlab.recipes.lm.checks import check_groups, check_kl
    from distlab.recipes.score.schedule import parse_schedule

    if cfg.guidance_prompt_mode not in ("", "chat", "text"):
        raise DistlabError(f"guidance_prompt_mode={cfg.guidance_prompt_mode!r} is not one of '', 'chat', 'text' "
                           f"('' = model.prompt_mode)")
    if cfg.evaluation.harness != "distlab":
        raise DistlabError(f"evaluation.harness={cfg.evaluation.harness} is GRPO's: SCoRe's two-turn evaluation asks "
                           f"and judges as training does; drop the key (or evaluate a GRPO run with it)")
    parse_schedule(cfg.stage_schedule)
    check_groups(cfg, world_size)
    check_kl(cfg.kl, {"beta1": cfg.beta1, "beta2": beta2_of(cfg)})
    if not 0 <= cfg.tau <= 1 or not 0 <= cfg.gamma <= 1:
        raise DistlabError(f"need 0 <= tau <= 1 and 0 <= gamma <= 1 (got tau={cfg.tau}, gamma={cfg.gamma})")
    check_models(cfg)
    check_arm(cfg)
    if cfg.hint_sees_execution and cfg.guidance == "none":
        raise DistlabError("hint_sees_execution=true gives the guidance model turn 1's test result, but guidance=none "
                           "loads none; set guidance=frozen or guidance=trained")
    if cfg.sft_steps > 0 and (cfg.model.prompt_mode != "text" or cfg.model.lora_r > 0):
        raise DistlabError("sft_steps > 0 (the supervised warm-up for tiny models) needs model.prompt_mode=text and "
                           "model.lora_r=0")
    if cfg.advantage == "critic" and cfg.scale_rewards != "none":
        log.warning("scale_rewards=%s applies to advantage=mc only; the critic's advantages are not rescaled",
                    cfg.scale_rewards.value)


def check_models(cfg: ScoreConfig) -> None:
    """The six models exist, each is trained or frozen as its role needs, and unused ones are said to be unused."""
    from distlab.recipes.lm.checks import check_roles

    missing = [n for n in MODEL_NAMES if n not in cfg.models]
    if missing:
        raise DistlabError(f"models lacks {', '.join(missing)}; this recipe's models are {', '.join(MODEL_NAMES)}")
    check_roles(cfg.models, ("policy", "critic", "value"),
                {"reference": "the KL anchor must not move",
                 "target_critic": "it follows the critic by soft updates (tau), never by gradients"})
    if cfg.models["guidance"].trainable and cfg.guidance != "trained":
        raise DistlabError(f"models.guidance.trainable=true but guidance={cfg.guidance}: the guidance key decides "
                           f"whether the guidance model trains; set guidance=trained")
    if cfg.guidance != "none" and cfg.models["guidance"].where.offload:
        if cfg.guidance == "trained":
            raise DistlabError("models.guidance.placement=offload streams weights per use and needs a frozen model; "
                               "guidance=trained trains it: use cpu, device or cuda:N")
        raise DistlabError("models.guidance.placement=offload would copy every layer's weights to the GPU once per "
                           "generated hint token; use cpu, device or cuda:N (offload suits the reference, which "
                           "only scores)")
    used = used_models(cfg)
    for name in MODEL_NAMES:
        where = cfg.models[name].where
        if name not in used and where != Placement():
            log.warning("models.%s.placement=%s is unused: these options (guidance=%s, advantage=%s, beta1=%s, "
                        "beta2=%s) load no %s model", name, where, cfg.guidance.value, cfg.advantage.value, cfg.beta1,
                        beta2_of(cfg), name)


def validate(cfg: ScoreConfig, world_size: int) -> None:
    from distlab.recipes.lm.checks import check_settings, check_sources

    check(cfg, world_size)
    check_settings(cfg)
    check_sources(cfg, cfg.guidance_source if cfg.guidance != "none" else "")


def evaluate_checkpoint(cfg: ScoreConfig, session, ckpt: Path) -> dict:
    from distlab.recipes.score.evaluate import evaluate_checkpoint as run

    return run(cfg, session, ckpt)


def head_params(width: int, hidden: int) -> int:
    """Parameters of one :class:`~.critic.TwinHead` (two 3-layer MLPs), counted without building it."""
    one = width * hidden + hidden + hidden * hidden + hidden + hidden + 1
    return 2 * one


def model_spec(cfg: ScoreConfig) -> list[ModelSpec]:
    """One spec per model these options load, each at its placement, for ``distlab doctor --recipe score``."""
    from distlab.recipes.lm.memory import lm_specs, shape, training_prompts
    from distlab.recipes.lm.models.source import load_tokenizer
    from distlab.recipes.score.episode import guidance_length_bound, turn2_length_bound

    names = used_models(cfg)
    episodes = max(1, cfg.prompts_per_step * cfg.num_generations)
    completion, guided = cfg.sampling.max_completion_length, "guidance" in names
    tok, tasks, few_shot, prompts = training_prompts(cfg)
    # an episode's longest sequence: turn 2's prompt (problem, y1, hint, instruction) and y2, as train.py's bounds
    seq = turn2_length_bound(tasks, tok, cfg.model.prompt_mode, prompts, cfg.instruction, few_shot,
                             cfg.restate_problem, completion, cfg.hint_max_tokens if guided else 0) + completion
    eff = replace(cfg, models=effective_models(cfg))
    specs = lm_specs(eff, [n for n in ("policy", "reference") if n in names], episodes, seq)
    if guided:
        gcfg = guidance_config(cfg)
        hint_seq = guidance_length_bound(tasks, load_tokenizer(gcfg.model.source), gcfg.model.prompt_mode,
                                         completion, cfg.error_tail_chars,
                                         cfg.hint_sees_execution) + cfg.hint_max_tokens
        specs += lm_specs(gcfg, ["guidance"], episodes, hint_seq, samplers=("guidance",))
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
                                   placement=s.placement,
                                   wrap=wrap_of(s, cfg.dist)))
    return specs


def export(cfg: ScoreConfig, ckpt: Path, out: Path, fmt: str, adapter: bool, dtype: str | None = None) -> None:
    """The trained self-correcting policy (the model a user deploys; the guidance model only trains it)."""
    from distlab.recipes.lm.models.export import export_hf

    export_hf(cfg, ckpt, out, fmt, adapter, dtype=dtype)


RECIPE = Recipe(name="score", config=ScoreConfig, train=train, presets_dir=PRESETS, batch_keys=("prompts_per_step",),
                lr_keys=("lr",), validate=validate, evaluate=evaluate_checkpoint, model_spec=model_spec,
                export=export, export_formats=EXPORT_FORMATS,
                report_metrics=("acc_t1", "acc_t2", "delta_t1_t2"),
                zero_means=LM_ZERO_MEANS, smoke=LM_SMOKE, python_inputs=python_inputs,
                # steps=0 is the untrained control arm: evaluate the starting model's two turns, train nothing
                positive_keys=(LM_POSITIVE_KEYS - {"steps"}) | {"critic_lr", "guidance_lr", "critic_updates",
                                                                "critic_hidden", "guidance_every", "hint_max_tokens",
                                                                "sft_pack", "sft_batch_size"},
                supports=frozenset({"dist.cpu_offload", "run.time_limit_s", "dist.wrap", "dist.compile",
                                    "dist.compile_split_ddp",
                                    "dist.compile_mode", "dist.activation_checkpointing",
                                    "dist.comm_hook", "optim.state_dtype"}))
