"""A run's config, resolved once and handed on instead of being resolved again by every process.

Resolving (schema, presets, overrides, smoke settings, value checks) and finalizing (run name, world-size scaling)
happen once: in the launcher before any rank exists, which writes the result to a file its ranks read
(:func:`write_handoff`, :func:`read_handoff`), or, for ranks started by another launcher (torchrun, srun), on the
job's rank 0, which broadcasts it. Either way every rank runs rank 0's result, so a run name or a scaled batch size
is decided in one place and a config file edited while a job starts cannot split the ranks.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from distlab.atomic import atomic_write_json
from distlab.config import to_object


@dataclass(frozen=True)
class ResolvedRun:
    """What a rank needs from the resolution: the finalized config, the scaling it applied, the smoke line."""

    config: str  # the finalized config as YAML (config.to_yaml)
    scaling: list[dict]  # config.apply_scaling's record, for the manifest
    smoke: str | None = None  # config.smoke_line's text, logged by rank 0 (None: not a smoke run)

    def config_of(self, recipe: Any) -> Any:
        """The config as the recipe's dataclass (the YAML merged onto its schema, so enums and types are real)."""
        return to_object(OmegaConf.merge(OmegaConf.structured(recipe.config), OmegaConf.create(self.config)))


def write_handoff(path: Path, run: ResolvedRun) -> Path:
    """Write ``run`` where the launcher's ranks read it (atomically: a rank never reads half a file)."""
    atomic_write_json(path, asdict(run))
    return path


def read_handoff(path: Path) -> ResolvedRun:
    return ResolvedRun(**json.loads(Path(path).read_text()))
