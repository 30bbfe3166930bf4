"""SCoRe's models: the policy and, as the options ask, a frozen reference, a guidance model and the critics.

Only the models the options use are loaded (``config.used_models``); each goes where its
``models.<name>.placement`` says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from distlab.recipes.lm.models.parts import unwrap_model
from distlab.recipes.lm.models.placed import load_placed
from distlab.recipes.score.config import ScoreConfig, guidance_config, used_models
from distlab.recipes.score.critic import TwinHead, make_target
from distlab.runtime.dist import module_checksum
from distlab.training.placement import place
from distlab.training.wrap import unwrap


@dataclass
class Models:
    """Every model these options use, placed; the ones they do not use are None and were never loaded."""

    policy: nn.Module
    tok: Any
    reference: nn.Module | None = None
    guidance: nn.Module | None = None
    gtok: Any = None
    critic: nn.Module | None = None  # twin Q heads
    value: nn.Module | None = None  # twin V heads
    target_critic: nn.ModuleDict | None = None  # {"q", "v"}: followed by soft updates, never by gradients


def load_models(cfg: ScoreConfig, session) -> Models:
    """Every model the options use, placed; the critic's heads are seeded apart from the policy."""
    rt = session.rt
    names = used_models(cfg)
    policy, tok = load_placed("policy", cfg, session, cfg.run.seed)
    m = Models(policy, tok)
    if "reference" in names:
        m.reference = load_placed("reference", cfg, session, cfg.run.seed, lora=False)[0]
    if "guidance" in names:
        m.guidance, m.gtok = load_placed("guidance", guidance_config(cfg), session, cfg.run.seed + 1)
    if "critic" in names:
        width = unwrap_model(unwrap(policy)).config.hidden_size
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.run.seed + 2)
            q, v = TwinHead(width, cfg.critic_hidden), TwinHead(width, cfg.critic_hidden)
        target = make_target(q, v)  # copied before placing: the target starts equal to the critic
        if cfg.dist.verify_init:
            rt.verify_identical(q, "initial critic")
            rt.verify_identical(v, "initial value")
        m.critic = place("critic", q, cfg.models["critic"], rt, cfg.dist)
        m.value = place("value", v, cfg.models["value"], rt, cfg.dist)
        m.target_critic = place("target_critic", target, cfg.models["target_critic"], rt, cfg.dist)
    return m


def checksums(m: Models, cfg: ScoreConfig) -> dict[str, str]:
    """A fingerprint of every model that training changes (the resume test compares them one by one)."""
    out = {"policy": module_checksum(unwrap(m.policy))}
    if cfg.guidance == "trained":
        out["guidance"] = module_checksum(unwrap(m.guidance))
    if m.critic is not None:
        out.update(critic=module_checksum(unwrap(m.critic)), value=module_checksum(unwrap(m.value)),
                   target_critic=module_checksum(m.target_critic))
    return out
