"""The ``distlab`` command: one entry for training, evaluation, data, suites, benchmarks and checks."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from distlab.errors import DistlabError, near_matches

TRAIN_FLAGS = ["--gpus", "--procs", "--nodes", "--node-rank", "--master-addr", "--master-port", "--max-restarts",
               "--rdzv-backend", "--config", "--show-config", "--dry-run"]
# legacy flags from the seed scripts, rewritten before parsing
GLOBAL_ALIASES = {"--num_gpus": "--gpus", "--num-gpus": "--gpus", "--nproc": "--procs"}

# (module, attribute) of the optional command groups; each has register(subparsers)
COMMAND_GROUPS = [
    ("distlab.doctor", "register"),
    ("distlab.bench", "register"),
    ("distlab.suite.cli", "register"),
]


def _add_launch_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpus", type=int, help="processes on CUDA GPUs with NCCL (-1 = all visible)")
    p.add_argument("--procs", type=int, help="processes on CPU with gloo (how tests exercise multi-process)")
    p.add_argument("--nodes", type=int, default=1, help="number of nodes (torchrun --nnodes)")
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--master-addr")
    p.add_argument("--master-port", type=int)
    p.add_argument("--max-restarts", type=int, default=0, help="restart all ranks after a failure, resuming")
    p.add_argument("--rdzv-backend", help="e.g. c10d for elastic multi-node rendezvous")


def _launch_opts(a: argparse.Namespace):
    from distlab.launch import LaunchOptions

    return LaunchOptions(a.gpus, a.procs, a.nodes, a.node_rank, a.master_addr, a.master_port, a.max_restarts,
                         a.rdzv_backend)


def _rewrite_aliases(argv: list[str], recipe_aliases: dict[str, str]) -> list[str]:
    out, i = [], 0
    while i < len(argv):
        tok = argv[i]
        name, eq, val = tok.partition("=")
        if name in GLOBAL_ALIASES:
            out.append(GLOBAL_ALIASES[name] + (f"={val}" if eq else ""))
        elif name in recipe_aliases:
            if not eq:
                if i + 1 >= len(argv):
                    raise DistlabError(f"{name} needs a value")
                i += 1
                val = argv[i]
            out.append(f"{recipe_aliases[name]}={val}")
        else:
            out.append(tok)
        i += 1
    return out


def _split_unknown(extra: list[str]) -> list[str]:
    for tok in extra:
        if tok.startswith("-"):
            hint = near_matches(tok.split("=")[0], TRAIN_FLAGS)
            raise DistlabError(f"unknown option {tok}" + (f"; did you mean {', '.join(hint)}?" if hint else ""))
    return extra


def cmd_train(a: argparse.Namespace, extra: list[str]) -> int:
    from distlab.launch import train

    overrides = _split_unknown(extra)
    if a.show_config or a.dry_run:
        from distlab.config import to_yaml
        from distlab.launch import preflight, world_plan

        nproc, pinned = world_plan(_launch_opts(a))
        _, cfg = preflight(a.recipe, a.config, [*pinned, *overrides], nproc * a.nodes)
        print(to_yaml(cfg), end="")
        return 0
    return train(a.recipe, a.config, overrides, _launch_opts(a))


def cmd_eval(a: argparse.Namespace, extra: list[str]) -> int:
    from distlab.evaluate import evaluate_run

    out = Path(a.output) if a.output else None
    return evaluate_run(Path(a.target), _split_unknown(extra), _launch_opts(a), out)


def cmd_export(a: argparse.Namespace, extra: list[str]) -> int:
    from distlab.checkpoint import export_model, find_checkpoint
    from distlab.rundir import run_dir_of

    _split_unknown(extra)
    ckpt = find_checkpoint(Path(a.target))
    out = Path(a.output) if a.output else run_dir_of(ckpt) / "model.pt"
    export_model(ckpt, out)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB) from {ckpt}")
    return 0


def cmd_recipes(a: argparse.Namespace, extra: list[str]) -> int:
    from distlab.recipe import recipe_names

    _split_unknown(extra)
    for name in recipe_names():
        print(name)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="distlab", description="Train reasoning and RL models on 1 CPU to many GPUs "
                                "with the same command.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    t = sub.add_parser("train", help="train a recipe (hrm, ppo, toy): distlab train hrm key=value ... --gpus N")
    t.add_argument("recipe")
    t.add_argument("--config", action="append", default=[], help="preset name or YAML file (repeatable)")
    t.add_argument("--show-config", action="store_true", help="print the resolved config and exit")
    t.add_argument("--dry-run", action="store_true", help="validate everything, print the config, start nothing")
    _add_launch_flags(t)
    t.set_defaults(func=cmd_train)
    e = sub.add_parser("eval", help="evaluate a run directory or checkpoint on all ranks")
    e.add_argument("target")
    e.add_argument("-o", "--output", help="folder for eval.json and logs (default: <run>/eval/<step>/)")
    _add_launch_flags(e)
    e.set_defaults(func=cmd_eval)
    x = sub.add_parser("export", help="write a single-file consolidated model from a checkpoint")
    x.add_argument("target", help="run directory or checkpoint directory")
    x.add_argument("-o", "--output")
    x.set_defaults(func=cmd_export)
    r = sub.add_parser("recipes", help="list the installed recipes")
    r.set_defaults(func=cmd_recipes)
    data = sub.add_parser("data", help="build datasets (sudoku, maze, arc)")
    data_sub = data.add_subparsers(dest="builder", metavar="BUILDER")
    _register_recipe_commands(sub, data_sub)
    for module, attr in COMMAND_GROUPS:
        try:
            getattr(importlib.import_module(module), attr)(sub)
        except ImportError:
            continue
    return p


def _register_recipe_commands(top, data_sub) -> None:
    from distlab.recipe import load_recipe, recipe_names

    for name in recipe_names():
        try:
            recipe = load_recipe(name)
        except (DistlabError, ImportError):
            continue
        if recipe.register_commands is not None:
            recipe.register_commands(top, data_sub)


def _call(func, a: argparse.Namespace, extra: list[str]):
    """Command groups registered by other modules may take (args) or (args, extra)."""
    import inspect

    if len(inspect.signature(func).parameters) >= 2:
        return func(a, extra)
    _split_unknown(extra)
    if extra:
        raise DistlabError(f"unexpected arguments: {' '.join(extra)}")
    return func(a)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if len(argv) > 1 and argv[0] == "train" and not argv[1].startswith("-"):
            from distlab.recipe import load_recipe

            argv = argv[:2] + _rewrite_aliases(argv[2:], load_recipe(argv[1]).aliases)
        parser = build_parser()
        a, extra = parser.parse_known_args(argv)
        if not getattr(a, "func", None):
            parser.print_help()
            return 0 if not argv else 2
        rc = _call(a.func, a, extra)
        return rc if isinstance(rc, int) else 0
    except DistlabError as exc:
        print(f"distlab: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("distlab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
