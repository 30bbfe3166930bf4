"""``distlab eval``: re-open a run's config, load a checkpoint on every rank, gather the metrics.

Evaluation never writes into the run it scores: its config, logs and results go to
``<run>/eval/<step>/`` (or ``--output``), so the run resumes exactly as it was left.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from distlab.errors import DistlabError
from distlab.run.rundir import eval_dir, run_dir_of
from distlab.training.checkpoint import find_checkpoint, say_skipped

if TYPE_CHECKING:
    from distlab.launch.launcher import MemoryCheck


def evaluate_run(target: Path, overrides: list[str], opts, output: Path | None = None,
                 memory_check: MemoryCheck | None = None) -> int:
    """Evaluate ``target``'s checkpoint (see :func:`distlab.launch.launcher.train` for ``memory_check``)."""
    from distlab.launch.launcher import train as launch

    skipped: list[str] = []
    ckpt = find_checkpoint(target, verify_given=True, skipped=skipped)  # verified there, once: the ranks load it
    say_skipped(skipped, ckpt, "evaluating")  # as export does: never a silent fallback to an older step
    run_dir = run_dir_of(ckpt)
    cfg_file = run_dir / "config.yaml"
    if not cfg_file.exists():
        raise DistlabError(f"{cfg_file} is missing; eval needs the run's resolved config")
    extra = json.loads((ckpt / "extra.json").read_text())
    recipe = extra.get("recipe")
    if not recipe:
        raise DistlabError(f"{ckpt} does not name its recipe")
    out = Path(output) if output else eval_dir(ckpt)
    return launch(recipe, [str(cfg_file)], overrides, opts, eval_checkpoint=ckpt, eval_output=out,
                  memory_check=memory_check)
