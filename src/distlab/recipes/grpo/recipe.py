"""The ``grpo`` recipe: GRPO for code LLMs with sandboxed execution rewards (seed 002)."""

from __future__ import annotations

import logging
from pathlib import Path

from distlab.config import Placement
from distlab.errors import DistlabError
from distlab.recipe import ModelSpec, Recipe
from distlab.recipes.grpo.config import ALIASES, GRPOConfig
from distlab.recipes.lm.config import LM_POSITIVE_KEYS, LM_SMOKE, LM_ZERO_MEANS
from distlab.recipes.lm.models.export import FORMATS as EXPORT_FORMATS
from distlab.recipes.lm.tasks.python_inputs import python_inputs

PRESETS = Path(__file__).parent / "presets"
log = logging.getLogger("distlab")


def train(cfg: GRPOConfig, session) -> dict:
    if cfg.async_.rollout_ranks:  # the job's last ranks only sample, the others only train
        from distlab.recipes.grpo.split_roles import train_split

        return train_split(cfg, session)
    from distlab.recipes.grpo.train import train as run

    return run(cfg, session)


def check(cfg: GRPOConfig, world_size: int) -> None:
    """Settings that cannot work together, named before any process starts."""
    from distlab.recipes.lm.checks import check_groups, check_kl, check_roles
    from distlab.recipes.lm.envs.checks import check_env
    from distlab.recipes.lm.rewards.functions import check_rewards

    trainers = check_off_policy(cfg, world_size)  # ranks that train: all but async.rollout_ranks
    check_groups(cfg, trainers)
    check_roles(cfg.models, ("policy",), {"reference": "the KL anchor must not move"})
    check_kl(cfg.kl, {"beta": cfg.beta})
    check_rewards(cfg.reward_funcs, cfg.reward_weights, cfg.reward_timeout_s)
    check_env(cfg.env, cfg.reward_funcs)
    if "overlong" in cfg.reward_funcs and not 0 < cfg.overlong_buffer < cfg.sampling.max_completion_length:
        raise DistlabError(f"overlong_buffer={cfg.overlong_buffer} must lie between 0 and "
                           f"sampling.max_completion_length={cfg.sampling.max_completion_length} (exclusive)")
    local = cfg.rows_per_rank(trainers)
    micro_steps = -(-local // cfg.micro_batch_size)
    accum = cfg.dist.grad_accum
    if accum != 1 and accum != micro_steps:  # 1, the default: as many micro-steps as the completions need
        raise DistlabError(f"dist.grad_accum={accum} (gradient_accumulation_steps) but each rank has {local} "
                           f"completions per step in micro-batches of {cfg.micro_batch_size} = {micro_steps} "
                           f"micro-steps; leave it at 1 or set micro_batch_size={-(-local // accum)}")
    if cfg.beta == 0 and cfg.models["reference"].where != Placement():
        log.warning("beta=0: no reference model is loaded, models.reference.placement is unused")


def check_off_policy(cfg: GRPOConfig, world_size: int) -> int:
    """``async.*``: a lag of 0 or more steps, a cap no token's weight is cut below 1 by, no dynamic sampling
    (which batch trains depends on rewards that, sampled ahead, are not in yet; not supported), and rollout ranks
    that sample ahead (a lag of 1 or more) for trainer ranks left to train. Returns the number of trainer ranks."""
    lag, cap = cfg.async_.off_policy_steps, cfg.async_.importance_sampling_cap
    rollout = cfg.async_.rollout_ranks
    if rollout and lag < 1:
        raise DistlabError(f"async.rollout_ranks={rollout} needs async.off_policy_steps >= 1 (rollout ranks sample "
                           f"the batches of later steps while the trainers update); set async.off_policy_steps=1")
    if rollout and rollout >= world_size:
        raise DistlabError(f"async.rollout_ranks={rollout} leaves no trainer among {world_size} rank(s); launch at "
                           f"least {rollout + 1} ranks (--procs or --gpus) or lower async.rollout_ranks")
    trainers = world_size - rollout
    if rollout > trainers:
        raise DistlabError(f"async.rollout_ranks={rollout} exceeds the {trainers} trainer rank(s): each rollout rank "
                           f"samples whole trainer shares, so {rollout - trainers} would idle; use at most "
                           f"async.rollout_ranks={world_size // 2}")
    if rollout and cfg.prompts_per_step % trainers:
        raise DistlabError(f"prompts_per_step={cfg.prompts_per_step} does not split over the {trainers} trainer "
                           f"rank(s) ({world_size} ranks less async.rollout_ranks={rollout}); use a multiple of "
                           f"{trainers}")
    if lag < 0:
        raise DistlabError(f"async.off_policy_steps={lag} must be >= 0 (0: the synchronous loop)")
    if not cap >= 1.0:
        raise DistlabError(f"async.importance_sampling_cap={cap} must be >= 1 (TRL and verl default to 2.0): a cap "
                           f"below 1 would shrink the weight of tokens the lag did not change")
    if lag and cfg.dynamic_sampling:
        raise DistlabError(f"async.off_policy_steps={lag} with dynamic_sampling=true is not supported: set one of "
                           f"them off")
    return trainers


def validate(cfg: GRPOConfig, world_size: int) -> None:
    from distlab.recipes.lm.checks import check_settings, check_sources
    from distlab.recipes.lm.envs.checks import check_env_tasks
    from distlab.recipes.lm.tasks.select import train_tasks

    check(cfg, world_size)
    check_settings(cfg)
    check_sources(cfg)
    if cfg.env.name:
        check_env_tasks(cfg.env, {t.kind for t in train_tasks(cfg.task)})


def evaluate_checkpoint(cfg: GRPOConfig, session, ckpt: Path) -> dict:
    from distlab.recipes.grpo.evaluate import evaluate_checkpoint as run

    return run(cfg, session, ckpt)


def model_spec(cfg: GRPOConfig) -> list[ModelSpec]:
    from distlab.recipes.grpo.episodes import prompt_bound
    from distlab.recipes.lm.memory import lm_specs, training_prompts

    rollouts = max(1, cfg.prompts_per_step * cfg.num_generations)
    tok, tasks, few_shot, _ = training_prompts(cfg)
    seq = prompt_bound(cfg, tok, tasks, few_shot) + cfg.sampling.max_completion_length  # as train.py sizes the cache
    return lm_specs(cfg, ["policy"] + (["reference"] if cfg.beta > 0 else []), rollouts, seq)


def export(cfg: GRPOConfig, ckpt: Path, out: Path, fmt: str, adapter: bool, dtype: str | None = None) -> None:
    from distlab.recipes.lm.models.export import export_hf

    export_hf(cfg, ckpt, out, fmt, adapter, dtype=dtype)


RECIPE = Recipe(name="grpo", config=GRPOConfig, train=train, presets_dir=PRESETS, batch_keys=("prompts_per_step",),
                lr_keys=("lr",), validate=validate, evaluate=evaluate_checkpoint, model_spec=model_spec,
                aliases=ALIASES, export=export, export_formats=EXPORT_FORMATS,
                report_metrics=("pass@1", "sampled_pass@1", "reward_mean"), positive_keys=LM_POSITIVE_KEYS,
                zero_means=LM_ZERO_MEANS, smoke=LM_SMOKE, python_inputs=python_inputs,
                eval_overrides=("async.rollout_ranks=0",),  # an evaluation samples on every rank it has
                layout_keys=("async_.rollout_ranks",),  # rollout ranks change who samples, not what is trained
                supports=frozenset({"dist.cpu_offload",
                                    "run.time_limit_s", "dist.grad_accum", "dist.wrap", "dist.compile", "dist.compile_split_ddp",
                                    "dist.compile_mode", "dist.activation_checkpointing",
                                    "dist.comm_hook", "optim.state_dtype"}))
