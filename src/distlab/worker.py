"""The code every rank runs: join the job, agree on one config, train, write the summary.

Started by torchrun (``python -m distlab.worker``), by ``srun``, by ``accelerate launch`` or
in-process for a single local run.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from distlab.config import finalize_config, resolve_config, to_object, to_yaml
from distlab.dist import init_runtime, shutdown
from distlab.errors import DistlabError
from distlab.logs import setup_logging
from distlab.recipe import Recipe, load_recipe
from distlab.rundir import checkpoints_dir, eval_dir, manifest, write_manifest
from distlab.session import Session

log = logging.getLogger("distlab")


def start_session(recipe: Recipe, presets: list[str], overrides: list[str], eval_output: Path | None = None
                  ) -> Session:
    """Join the job, agree on the config, prepare the run directory (or, for eval, its own output folder)."""
    cfg = resolve_config(recipe, presets, overrides)
    rt = init_runtime(cfg.dist.backend, cfg.dist.device, cfg.dist.timeout_s,
                      devices_per_rank=cfg.dist.devices_per_rank)
    payload = None
    if rt.is_main:
        cfg, scaling = finalize_config(recipe, cfg, rt.world_size)
        payload = (to_yaml(cfg), scaling)
    payload = rt.broadcast_object(payload)
    cfg = to_object(OmegaConf.merge(OmegaConf.structured(recipe.config), OmegaConf.create(payload[0])))
    run_dir = Path(cfg.run.dir) / cfg.run.name if eval_output is None else Path(eval_output)
    if rt.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(to_yaml(cfg))
        write_manifest(run_dir, manifest(rt, recipe.name, cfg.run.name, payload[1]))
    rt.barrier("run directory ready")
    setup_logging(run_dir, rt.rank)
    log.debug("start")
    for h in log.handlers:  # the pid goes to the rank's own file: fault-injection tools and people look there
        if getattr(h, "baseFilename", "").endswith(f"rank{rt.rank}.log"):
            h.handle(log.makeRecord(log.name, logging.INFO, __file__, 0, "rank %d pid=%d host=%s",
                                    (rt.rank, os.getpid(), os.uname().nodename), None))
    if rt.is_main:
        log.info("run %s: %s x %d (%s), dir %s", cfg.run.name, rt.device.type, rt.world_size, rt.launcher, run_dir)
    ckpt_root = checkpoints_dir(Path(cfg.run.dir) / cfg.run.name)
    return Session(cfg, rt, recipe.name, run_dir, payload[1], ckpt_root=ckpt_root, eval_mode=eval_output is not None)


def run(recipe_name: str, presets: list[str], overrides: list[str], eval_checkpoint: Path | None = None,
        eval_output: Path | None = None) -> dict:
    recipe = load_recipe(recipe_name)
    if eval_checkpoint is not None and eval_output is None:
        eval_output = eval_dir(eval_checkpoint)
    session = start_session(recipe, presets, overrides, eval_output)
    session.install_signal_handlers()
    try:
        if eval_checkpoint is not None:
            result = _evaluate(recipe, session, eval_checkpoint)
        else:
            result = recipe.train(session.cfg, session)
            session.finish(result)
        # all ranks tear down together: a rank that destroys its gloo group while rank 0 is still writing
        # results can be aborted by gloo's worker thread (SIGABRT, "terminate called without an active exception")
        session.rt.barrier("teardown")
        return result
    finally:
        shutdown(session.rt)


def _evaluate(recipe: Recipe, session: Session, ckpt: Path) -> dict:
    """Eval mode: the run's own config, a given checkpoint, results into ``eval.json`` beside it."""
    if recipe.evaluate is None:
        raise DistlabError(f"recipe '{recipe.name}' has no evaluation")
    metrics = recipe.evaluate(session.cfg, session, ckpt)
    if session.rt.is_main:
        from distlab.atomic import atomic_write_json

        out = session.run_dir / "eval.json"
        atomic_write_json(out, {"checkpoint": str(ckpt), **metrics})
        log.info("eval of %s: %s", ckpt.name, {k: v for k, v in metrics.items() if isinstance(v, float)})
    session.metrics.close()
    return metrics


def worker_argv(recipe: str, presets: list[str], overrides: list[str], eval_checkpoint: Path | None = None,
                eval_output: Path | None = None) -> list[str]:
    """The command line of one rank (what the launcher hands to torchrun); :func:`main` parses it."""
    flags = [x for p in presets for x in ("--config", p)]
    if eval_checkpoint is not None:
        flags += ["--eval", str(Path(eval_checkpoint).resolve())]
    if eval_output is not None:
        flags += ["--eval-output", str(Path(eval_output).resolve())]
    return [recipe, *flags, *overrides]


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="distlab.worker", add_help=False)
    p.add_argument("recipe")
    p.add_argument("--config", action="append", default=[])
    p.add_argument("--eval", dest="eval_checkpoint", type=Path, default=None)
    p.add_argument("--eval-output", dest="eval_output", type=Path, default=None)
    a, a.overrides = p.parse_known_args(argv)
    return a


def main(argv: list[str] | None = None) -> int:
    a = _parse(list(sys.argv[1:] if argv is None else argv))
    rank = os.environ.get("RANK", "0")
    try:
        run(a.recipe, a.config, a.overrides, a.eval_checkpoint, a.eval_output)
        return 0
    except DistlabError as exc:
        print(f"distlab: error: {exc}", file=sys.stderr)
        return 2
    except Exception:
        log.error("rank %s failed:\n%s", rank, traceback.format_exc())
        print(f"distlab: rank {rank} failed: {traceback.format_exc().strip().splitlines()[-1]}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
