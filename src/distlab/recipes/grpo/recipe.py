"""The ``grpo`` recipe: GRPO for code LLMs with sandboxed execution rewards (seed 002)."""

from __future__ import annotations

from pathlib import Path

from distlab.errors import DistlabError
from distlab.recipe import ModelSpec, Recipe
from distlab.recipes.lm.settings import check_checkpointing
from distlab.recipes.grpo.config import ALIASES, GRPOConfig

PRESETS = Path(__file__).parent / "presets"


def train(cfg: GRPOConfig, session) -> dict:
    from distlab.recipes.grpo.train import train as run

    return run(cfg, session)


def validate(cfg: GRPOConfig, world_size: int) -> None:
    from distlab.recipes.grpo.train import check
    from distlab.recipes.lm.model_source import resolve_source
    from distlab.recipes.lm.tasks_for import check_task_data

    check(cfg, world_size)
    resolve_source(cfg.model.source)  # a bad source fails here, before any rank loads it
    check_task_data(cfg.task)  # missing MBPP files too
    check_checkpointing(cfg)


def evaluate_checkpoint(cfg: GRPOConfig, session, ckpt: Path) -> dict:
    from distlab.recipes.grpo.evaluate import evaluate_checkpoint as run

    return run(cfg, session, ckpt)


def model_spec(cfg: GRPOConfig) -> list[ModelSpec]:
    from distlab.recipes.lm.memory import lm_specs

    rollouts = max(1, cfg.prompts_per_step * cfg.num_generations)
    return lm_specs(cfg, ["policy"] + (["reference"] if cfg.beta > 0 else []), rollouts)


def register_commands(top, data_subparsers) -> None:  # noqa: ARG001
    from distlab.recipes.lm.sandbox.cli import add_command

    add_command(top)


RECIPE = Recipe(name="grpo", config=GRPOConfig, train=train, presets_dir=PRESETS, batch_keys=("prompts_per_step",),
                lr_keys=("lr",), validate=validate, evaluate=evaluate_checkpoint, model_spec=model_spec,
                register_commands=register_commands, aliases=ALIASES,
                report_metrics=("pass@1", "sampled_pass@1", "reward_mean"),
                supports=frozenset({"run.time_limit_s", "dist.wrap", "dist.compile",
                                    "dist.compile_mode", "dist.activation_checkpointing",
                                    "dist.comm_hook", "optim.state_dtype"}))
