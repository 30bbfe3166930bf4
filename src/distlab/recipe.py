"""What a recipe gives the core: its config schema, its training function and a few optional hooks.

Recipes are found through the ``distlab.recipes`` entry-point group, so the core never imports one
by name and a package outside distlab can add its own.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distlab.errors import DistlabError, near_matches

# Used when the package was put on sys.path without being installed (no entry-point metadata).
BUILTIN = {"hrm": "distlab.recipes.hrm.recipe:RECIPE", "ppo": "distlab.recipes.ppo.recipe:RECIPE",
           "toy": "distlab.recipes.toy:RECIPE"}


@dataclass(frozen=True)
class Recipe:
    name: str
    config: type
    train: Callable[[Any, Any], dict]  # (cfg, Session) -> summary
    presets_dir: Path | None = None
    batch_keys: tuple[str, ...] = ()  # scaled by scale.batch
    lr_keys: tuple[str, ...] = ()  # scaled by scale.lr
    validate: Callable[[Any, int], None] | None = None  # fail-fast checks in the launching process
    evaluate: Callable[[Any, Any, Path], dict] | None = None  # (cfg, Session, checkpoint) -> metrics
    model_spec: Callable[[Any], Any] | None = None  # doctor's memory estimate
    register_commands: Callable[[Any, Any], None] | None = None  # (top-level, `data`) subparsers: extra commands
    aliases: dict[str, str] = field(default_factory=dict)  # legacy flag -> override key


def _targets() -> dict[str, str]:
    targets = dict(BUILTIN)
    for ep in md.entry_points(group="distlab.recipes"):
        targets[ep.name] = ep.value
    return targets


def recipe_names() -> list[str]:
    return sorted(_targets())


def load_recipe(name: str) -> Recipe:
    targets = _targets()
    if name not in targets:
        hint = near_matches(name, targets)
        raise DistlabError(f"unknown recipe '{name}'; available: {', '.join(sorted(targets))}"
                           + (f" (did you mean {hint[0]}?)" if hint else ""))
    module, _, attr = targets[name].partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as exc:
        raise DistlabError(f"recipe '{name}' cannot load: missing module {exc.name}") from None
