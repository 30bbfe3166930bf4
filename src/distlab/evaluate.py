"""``distlab eval``: re-open a run's config, load a checkpoint on every rank, gather the metrics."""

from __future__ import annotations

import json
from pathlib import Path

from distlab.checkpoint import STEP_DIR, verify_checkpoint
from distlab.errors import DistlabError


def find_checkpoint(target: Path) -> Path:
    """A checkpoint directory, or the newest valid one under a run directory."""
    target = Path(target)
    if not target.exists():
        raise DistlabError(f"{target} does not exist; pass a run directory (runs/<name>) or a checkpoint directory")
    if STEP_DIR.match(target.name):
        return target
    root = target / "checkpoints" if (target / "checkpoints").is_dir() else target
    steps = sorted((p for p in root.iterdir() if p.is_dir() and STEP_DIR.match(p.name)), reverse=True)
    for s in steps:
        if verify_checkpoint(s) is None:
            return s
    raise DistlabError(f"no usable checkpoint under {root}; train first (distlab train ...)")


def run_dir_of(ckpt: Path) -> Path:
    return ckpt.parent.parent


def evaluate_run(target: Path, overrides: list[str], opts) -> int:
    from distlab.launch import train as launch

    ckpt = find_checkpoint(target)
    run_dir = run_dir_of(ckpt)
    cfg_file = run_dir / "config.yaml"
    extra = json.loads((ckpt / "extra.json").read_text())
    if not cfg_file.exists():
        raise DistlabError(f"{cfg_file} is missing; eval needs the run's resolved config")
    recipe = extra.get("recipe")
    if not recipe:
        raise DistlabError(f"{ckpt} does not name its recipe")
    # evaluation never trains or writes checkpoints into the run
    return launch(recipe, [str(cfg_file)], ["run.resume=never", *overrides], opts, eval_checkpoint=ckpt)
