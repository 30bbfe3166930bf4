"""What a recipe gives the core: its config schema, its training function and a few optional hooks.

Recipes are found through the ``distlab.recipes`` entry-point group, so the core never imports one
by name and a package outside distlab can add its own.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distlab.config import Placement
from distlab.errors import DistlabError, near_matches

# Bytes of optimizer state per *trainable* parameter. Adam keeps two fp32 moments; optim.state_dtype=bf16 or
# int8 stores them in 2 or 1 byte(s) each (adam_bf16, adam_int8; int8's per-block scales are under 2%).
OPTIMIZER_STATE_BYTES: dict[str, int] = {"adam": 8, "adamw": 8, "adam_bf16": 4, "adam_int8": 2, "sgd": 4, "none": 0}


def adam_state_key(state_dtype: Any, fp32_name: str = "adamw") -> str:
    """The ``OPTIMIZER_STATE_BYTES`` key of Adam's moments held at ``optim.state_dtype`` (fp32 keeps ``fp32_name``)."""
    return fp32_name if state_dtype == "fp32" else f"adam_{state_dtype}"


@dataclass(frozen=True)
class ModelSpec:
    """What the doctor needs to know about a model to size it (built from a recipe config)."""

    name: str
    params: int
    trainable_params: int | None = None
    activation_bytes_per_example: int = 0
    batch_per_device: int = 1
    param_dtype_bytes: int = 4
    optimizer: str = "adam"
    placement: str = "device"  # device | cuda:N | cpu | offload (see distlab.config.Placement)
    wrap: str = "ddp"  # ddp | fsdp | none: how trainable state is spread over ranks

    def __post_init__(self) -> None:
        if self.params <= 0:
            raise DistlabError(f"model {self.name!r}: params must be > 0, got {self.params}")
        if self.trainable_params is not None and not 0 <= self.trainable_params <= self.params:
            raise DistlabError(f"model {self.name!r}: trainable_params must be in [0, params={self.params}]")
        if self.batch_per_device < 1 or self.activation_bytes_per_example < 0:
            raise DistlabError(f"model {self.name!r}: batch_per_device must be >= 1 and activation bytes >= 0")
        if self.param_dtype_bytes not in (1, 2, 4, 8):
            raise DistlabError(f"model {self.name!r}: param_dtype_bytes must be 1, 2, 4 or 8, "
                               f"got {self.param_dtype_bytes}")
        if self.optimizer not in OPTIMIZER_STATE_BYTES:
            hint = near_matches(self.optimizer, OPTIMIZER_STATE_BYTES)
            raise DistlabError(f"model {self.name!r}: unknown optimizer {self.optimizer!r}; use one of "
                               f"{sorted(OPTIMIZER_STATE_BYTES)}" + (f" (did you mean {hint[0]!r}?)" if hint else ""))
        Placement.parse(self.placement, self.name)

    @property
    def where(self) -> Placement:
        return Placement.parse(self.placement, self.name)

    @property
    def trainable(self) -> int:
        return self.params if self.trainable_params is None else self.trainable_params


NOT_INSTALLED = ("no recipes are installed (the 'distlab.recipes' entry points are missing); install distlab "
                 "from the repository root with: pip install -e .")


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
    # ``distlab export --format F`` for F in export_formats (the core writes ``pt`` itself): (cfg, checkpoint,
    # out_dir, F, adapter) writes the model into the empty out_dir, on one process; the checkpoint is verified.
    # An export that also takes a ``dtype`` keyword (bf16, fp16, fp32) serves ``--dtype``
    export: Callable[[Any, Path, Path, str, bool], None] | None = None
    export_formats: tuple[str, ...] = ()
    model_spec: Callable[[Any], Any] | None = None  # doctor's memory estimate: a ModelSpec or a list, one per model
    register_commands: Callable[[Any, Any], None] | None = None  # (top-level, `data`) subparsers: extra commands
    aliases: dict[str, str] = field(default_factory=dict)  # legacy flag -> override key
    # Suite reports: the headline metrics (summary.json / eval lines), the primary one first; the core
    # knows no metric names, so without these a report lists every numeric eval metric.
    report_metrics: tuple[str, ...] = ()
    percent_metrics: tuple[str, ...] | None = None  # fractions shown in %; None: all of report_metrics
    steps_key: str = "steps"  # config key with the run's length, in the units of metrics.jsonl's "step"
    # Which of the optional core settings (distlab.config.OPTIONAL_CORE_KEYS) this recipe acts on; the
    # others are refused at preflight instead of silently ignored. None: not declared, nothing is refused.
    supports: frozenset[str] | None = None
    # Leaf names of the recipe's numeric keys that count or scale something (steps, lr, d_model, ...): 0 or less
    # is refused where the default is positive. The core checks its own keys (distlab.config.POSITIVE_KEYS) too.
    positive_keys: frozenset[str] = frozenset()
    # Leaf names of keys whose 0 means something other than "off", and what (named in the refusal of a negative)
    zero_means: Mapping[str, str] = field(default_factory=dict)
    # run.smoke=true (``distlab train --smoke``): dotted key -> value put over the user's config so the run checks
    # the whole pipeline in seconds: few steps and a small evaluation (a smaller positive number of the user's stays)
    smoke: Mapping[str, Any] = field(default_factory=dict)
    # distlab.train(RECIPE, ..., NAME=value): inputs from Python beyond config keys (the LM recipes' task dicts),
    # turned into overrides; (inputs, run.dir) -> ["key=value", ...]; files it writes go under run.dir
    python_inputs: Callable[[dict[str, Any], Path], list[str]] | None = None
    # ``distlab eval`` of a checkpoint: overrides the launcher puts before the user's, for settings of the training
    # job's shape that an evaluation does not use and its own world size may not satisfy (ranks kept for sampling)
    eval_overrides: tuple[str, ...] = ()
    # Dotted schema fields that say how the job's ranks share the work, not what is trained (GRPO's rollout ranks):
    # left out of the default run name, so the same command on another layout resumes the same run
    layout_keys: tuple[str, ...] = ()


def _targets() -> dict[str, str]:
    """Entry-point name -> ``module:attr``; raises the install hint when there are none at all."""
    targets = {ep.name: ep.value for ep in md.entry_points(group="distlab.recipes")}
    if not targets:
        raise DistlabError(NOT_INSTALLED)
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
        raise DistlabError(f"recipe '{name}' cannot load: missing module {exc.name}; {install_hint(exc.name)}") from None


def install_hint(module: str | None) -> str:
    """How to get ``module``: the distlab extra that declares it (read from the installed package's metadata, so
    the hint cannot drift from pyproject.toml), else ``pip install`` of the module itself."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    top = (module or "").split(".")[0]
    meta = md.metadata("distlab")
    # the extra a user asks for first, not the contributors' one that repeats it
    extras = sorted(meta.get_all("Provides-Extra") or [], key=lambda e: e == "dev")
    wanted = canonicalize_name(top)
    for line in meta.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if canonicalize_name(req.name) != wanted or req.marker is None:
            continue
        extra = next((e for e in extras if req.marker.evaluate({"extra": e})), None)
        if extra is not None:
            return f"install it with: pip install 'distlab[{extra}]' (or pip install -e '.[{extra}]' in a checkout)"
    return f"install it with: pip install {top}"
