"""The ``distlab`` command: one entry for training, evaluation, data, suites, benchmarks and checks."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import sys
from pathlib import Path

from distlab.errors import DistlabError, near_matches

TRAIN_FLAGS = ["--gpus", "--procs", "--nodes", "--node-rank", "--master-addr", "--master-port", "--max-restarts",
               "--rdzv-backend", "--force", "--config", "--show-config", "--dry-run", "--smoke"]
# legacy flags from the seed scripts, rewritten before parsing
GLOBAL_ALIASES = {"--num_gpus": "--gpus", "--num-gpus": "--gpus", "--nproc": "--procs"}

# (module, attribute) of the optional command groups; each has register(subparsers)
COMMAND_GROUPS = [
    ("distlab.doctor", "register"),
    ("distlab.launch.bench", "register"),
    ("distlab.suite.cli", "register"),
    ("distlab.launch.slurm", "register"),
]
# Commands the core defines itself: for these no recipe is imported, so their help (and `distlab --help`)
# answers without loading torch. Anything else may come from a recipe's ``register_commands``.
CORE_COMMANDS = frozenset({"train", "eval", "export", "recipes", "doctor", "bench", "suite", "slurm"})
# Entry-point group where a package declares the top-level commands its recipe registers (name = the command,
# value = the Recipe object, as in "distlab.recipes"): a cheap index read from metadata without importing.
COMMANDS_GROUP = "distlab.commands"
HELP_FLAGS = ("-h", "--help")


def _add_launch_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpus", type=int, help="processes on CUDA GPUs with NCCL (-1 = all visible)")
    p.add_argument("--procs", type=int, help="processes on CPU with gloo (how tests exercise multi-process)")
    p.add_argument("--nodes", type=int, default=1, help="number of nodes (torchrun --nnodes)")
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--master-addr")
    p.add_argument("--master-port", type=int)
    p.add_argument("--max-restarts", type=int, default=0, help="restart all ranks after a failure, resuming")
    p.add_argument("--rdzv-backend", help="e.g. c10d for elastic multi-node rendezvous")
    p.add_argument("--force", action="store_true", help="start even where the doctor's memory estimate says the "
                   "run cannot fit on this machine")


def _launch_opts(a: argparse.Namespace):
    from distlab.launch.launcher import LaunchOptions

    return LaunchOptions(a.gpus, a.procs, a.nodes, a.node_rank, a.master_addr, a.master_port, a.max_restarts,
                         a.rdzv_backend, a.force)


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
    from distlab.launch.launcher import train

    overrides = _split_unknown(extra) + (["run.smoke=true"] if a.smoke else [])
    if a.show_config or a.dry_run:
        from distlab.config import to_yaml
        from distlab.launch.launcher import preflight, world_plan

        nproc, pinned = world_plan(_launch_opts(a))
        _, cfg = preflight(a.recipe, a.config, [*pinned, *overrides], nproc * a.nodes,
                           show_only=not a.dry_run)
        print(to_yaml(cfg), end="")
        return 0
    return train(a.recipe, a.config, overrides, _launch_opts(a), memory_check=_memory_check())


def cmd_eval(a: argparse.Namespace, extra: list[str]) -> int:
    from distlab.launch.evaluate import evaluate_run

    out = Path(a.output) if a.output else None
    return evaluate_run(Path(a.target), _split_unknown(extra), _launch_opts(a), out, memory_check=_memory_check())


def _installed_recipes() -> str:
    """The recipes' names for ``distlab --help``, from the entry points (no recipe module is imported)."""
    from distlab.recipe import recipe_names

    try:
        return ", ".join(recipe_names())
    except DistlabError:
        return "none installed"


def _memory_check():
    """The doctor's memory verdict, which the ``train`` and ``eval`` commands (and so every run of ``suite run``)
    apply before a run starts; the launcher itself, a core module, never imports the doctor."""
    from distlab.doctor.fit import check_launch

    return check_launch


def cmd_export(a: argparse.Namespace, extra: list[str]) -> int:
    from distlab.training.checkpoint import say_skipped
    from distlab.launch.export import export_checkpoint

    _split_unknown(extra)
    out, ckpt, skipped = export_checkpoint(Path(a.target), a.format, Path(a.output) if a.output else None,
                                           a.adapter, a.dtype)
    say_skipped(skipped, ckpt, "exporting")
    size = out.stat().st_size if out.is_file() else sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"wrote {out} ({size / 1e6:.1f} MB) from {ckpt}")
    return 0


def cmd_recipes(a: argparse.Namespace, extra: list[str]) -> int:
    from distlab.recipe import recipe_names

    _split_unknown(extra)
    for name in recipe_names():
        print(name)
    return 0


def build_parser(command: str | None = "") -> argparse.ArgumentParser:
    """The ``distlab`` parser; ``command`` (the first word of the command line) decides which recipes load.

    A core command imports no recipe; ``None`` (top-level help) lists recipe commands from their cheap
    declarations; a declared recipe command loads only its recipe; anything else (``""``, unknown words)
    loads every recipe, as a recipe outside distlab may register commands it did not declare.
    """
    p = argparse.ArgumentParser(prog="distlab", description="Train reasoning and RL models on 1 CPU to many GPUs "
                                "with the same command.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    t = sub.add_parser("train", help=f"train a recipe ({_installed_recipes()}): distlab train hrm key=value ... "
                       "--gpus N",
                       epilog="distlab train RECIPE --help also lists the recipe's presets and every config key "
                              "(type, default, meaning); distlab recipes lists the recipes.")
    t.add_argument("recipe")
    t.add_argument("--config", action="append", default=[], help="preset name or YAML file (repeatable)")
    t.add_argument("--show-config", action="store_true", help="print the resolved config and exit")
    t.add_argument("--dry-run", action="store_true", help="validate everything, print the config, start nothing")
    t.add_argument("--smoke", action="store_true", help="a quick end-to-end check (run.smoke=true): the recipe's "
                   "smoke settings cut steps and evaluation to a few seconds' worth; the run gets its own name")
    _add_launch_flags(t)
    t.set_defaults(func=cmd_train)
    e = sub.add_parser("eval", help="evaluate a run directory or checkpoint on all ranks")
    e.add_argument("target")
    e.add_argument("-o", "--output", help="folder for eval.json and logs (default: <run>/eval/<step>/)")
    _add_launch_flags(e)
    e.set_defaults(func=cmd_eval)
    x = sub.add_parser("export", help="write a checkpoint's model for use outside distlab (--format pt | hf)")
    x.add_argument("target", help="run directory (its newest good checkpoint) or checkpoint directory")
    x.add_argument("-o", "--output", help="default: <run>/model.pt, <run>/hf or <run>/hf-adapter")
    x.add_argument("--format", default="pt", help="pt: one torch.save file of every model (default); hf: a "
                   "save_pretrained directory that transformers loads (LM recipes), LoRA merged")
    x.add_argument("--adapter", action="store_true", help="with --format hf: keep the LoRA adapter (PEFT) "
                   "instead of merging it")
    x.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), help="with --format hf: cast every weight (after "
                   "the LoRA merge) to this dtype; default: as the checkpoint holds them (trained weights fp32)")
    x.set_defaults(func=cmd_export)
    r = sub.add_parser("recipes", help="list the installed recipes")
    r.set_defaults(func=cmd_recipes)
    data = sub.add_parser("data", help="build datasets (sudoku, maze, arc) or write an LM task set (tasks)")
    data_sub = data.add_subparsers(dest="builder", metavar="BUILDER")
    if command not in CORE_COMMANDS:
        _register_recipe_commands(sub, data_sub, command)
    for module, attr in COMMAND_GROUPS:
        try:
            getattr(importlib.import_module(module), attr)(sub)
        except ImportError:
            continue
    return p


def declared_commands() -> dict[str, list[md.EntryPoint]]:
    """Command name -> the recipe entry points that declare it (``distlab.commands``); read without importing.

    ``data.NAME`` entries add to the core ``data`` command (one entry point name per recipe that adds builders)."""
    out: dict[str, list[md.EntryPoint]] = {}
    for ep in md.entry_points(group=COMMANDS_GROUP):
        out.setdefault(ep.name.split(".")[0], []).append(ep)
    return out


def _register_recipe_commands(top, data_sub, command: str | None = "") -> None:
    """Add the commands recipes contribute, importing as few recipes (and so as little torch) as possible."""
    declared = declared_commands()
    if command is None and declared:  # top-level help: name the commands, import nothing
        owners = {ep.value: name for name, ep in _recipe_entry_points().items()}
        for name, eps in sorted(declared.items()):
            if name == "data":  # a core command whose builders come from recipes: already listed
                continue
            by = ", ".join(sorted({f"recipe {owners[ep.value]}" if ep.value in owners else ep.module for ep in eps}))
            top.add_parser(name, help=f"added by {by}: distlab {name} --help")
        return
    if command in declared:
        targets = [(ep.value, ep.load) for ep in declared[command]]
    else:
        from distlab.recipe import load_recipe, recipe_names

        targets = [(name, lambda name=name: load_recipe(name)) for name in recipe_names()]
    done: set[str] = set()
    for key, load in targets:
        try:
            recipe = load()
        except (DistlabError, ImportError):
            continue
        if recipe.register_commands is not None and key not in done:
            done.add(key)
            recipe.register_commands(top, data_sub)


def _recipe_entry_points() -> dict[str, md.EntryPoint]:
    return {ep.name: ep for ep in md.entry_points(group="distlab.recipes")}


def recipe_help(recipe) -> str:
    """What ``distlab train RECIPE --help`` adds to the flags: the presets and every config key.

    Each key comes with its type, its default and the comment written beside the dataclass field, so
    the help can never drift from the schema the overrides are checked against.
    """
    lines = [f"recipe {recipe.name}: override any key below as key=value (nested keys with dots)", ""]
    presets = sorted(recipe.presets_dir.glob("*.yaml")) if recipe.presets_dir else []
    if presets:
        lines.append("presets (--config NAME):")
        width = max(len(p.stem) for p in presets)
        lines += [f"  {p.stem:<{width}}  {_preset_summary(p)}".rstrip() for p in presets]
        lines.append("")
    rows = config_rows(recipe.config)
    lines.append("config keys (type = default  meaning):")
    kw = max(len(r[0]) for r in rows)
    unsupported = _unsupported_keys(recipe)
    for key, typ, default, meaning in rows:
        if key in unsupported:
            meaning = "not used by this recipe: changing it is refused" + (f"; {meaning}" if meaning else "")
        text = f"  {key:<{kw}}  {typ} = {default}"
        lines.append(text + (f"  # {meaning}" if meaning else ""))
    return "\n".join(lines) + "\n"


def _unsupported_keys(recipe) -> set[str]:
    """Core keys this recipe ignores (and so refuses), as the config check decides."""
    try:
        from distlab.config import OPTIONAL_CORE_KEYS
    except ImportError:
        return set()
    supports = getattr(recipe, "supports", None)
    return set() if supports is None else set(OPTIONAL_CORE_KEYS) - set(supports)


def _preset_summary(path: Path, limit: int = 110) -> str:
    """The first sentence of a preset file's leading comment, cut to one line."""
    words: list[str] = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        words.append(line.lstrip("#").strip())
    text = " ".join(w for w in words if w)
    cut = text.find(". ")
    text = text if cut < 0 else text[:cut + 1]
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


def config_rows(cls: type, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(dotted key, type, default, comment) for every leaf of a config dataclass, nested ones flattened."""
    import dataclasses
    import enum
    import typing

    comments = _field_comments(cls)
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # an annotation that cannot be evaluated here: fall back to its text
        hints = {}
    rows = []
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            rows += config_rows(type(default), f"{prefix}{f.name}.")
            continue
        hint = hints.get(f.name, f.type)
        if isinstance(default, enum.Enum):
            typ, shown = "|".join(m.value for m in type(default)), default.value
        else:
            typ = hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")
            shown = "(required)" if default is dataclasses.MISSING else default
        text = "null" if shown is None else ('""' if shown == "" else str(shown))
        # a config built at run time (make_dataclass) has no source lines: its fields carry metadata["help"]
        rows.append((prefix + f.name, typ, text, f.metadata.get("help") or comments.get(f.name, "")))
    return rows


def _field_comments(cls: type) -> dict[str, str]:
    """Field name -> the ``# comment`` on its line, from the class and its dataclass bases."""
    import inspect
    import re

    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            src = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        for line in src.splitlines():
            m = re.match(r"\s+(\w+)\s*:[^#]*#\s*(.*)$", line)
            if m and "=" in line.split("#")[0]:
                out[m.group(1)] = m.group(2).strip()
    return out


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
        command = argv[0] if argv and not argv[0].startswith("-") else None
        if len(argv) > 1 and argv[0] == "train" and not argv[1].startswith("-"):
            from distlab.recipe import load_recipe

            recipe = load_recipe(argv[1])
            if any(tok in HELP_FLAGS for tok in argv[2:]):
                try:
                    build_parser("train").parse_args(["train", "--help"])  # the flags; argparse exits after
                except SystemExit:
                    pass
                print(f"\n{recipe_help(recipe)}", end="")
                return 0
            argv = argv[:2] + _rewrite_aliases(argv[2:], recipe.aliases)
        parser = build_parser(command)
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
    except OSError as exc:  # a path the user gave cannot be read or written: say which and why, in one line
        import errno

        where = exc.filename or "a file"
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            print(f"distlab: error: no space left on device writing {where}; free space or choose another path",
                  file=sys.stderr)
        else:
            print(f"distlab: error: {exc.strerror or exc}: {where}; check the path and its permissions, or choose "
                  f"another", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
