"""``distlab.train``: the ``distlab train`` command as a Python function, for notebooks and scripts.

It exists so that a user coming from TRL or Lightning can stay in Python (pass a reward function they just wrote,
a list of task dicts, a dict of settings) and still get everything the command gives: the same config checks before
anything starts, the same run directory, resume, logs and launcher. It builds the command's ``key=value``
overrides and runs the command's own launch path; it adds no second way to train.

One process (no ``procs``/``gpus``, or 1) runs here, in this Python process, so a reward function defined in a
notebook cell is called as it is. Several processes are started by torchrun, which cannot carry a Python object
across: there a function must be importable, defined at the top level of a ``.py`` module on ``PYTHONPATH``, and is
passed by its import path ``module:function`` (the way the config names a user's function anyway); a function
defined in a notebook or inside another function is refused with the fix.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import json
import logging
import os
import re
import shlex
import signal
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from distlab.errors import DistlabError

# Functions that live only in this process (a notebook's), by the name the run's config holds them under,
# ``distlab.api:NAME``: the config system's import-path convention finds them here through ``__getattr__``.
_LOCAL: dict[str, Callable[..., Any]] = {}


def __getattr__(name: str) -> Any:
    try:
        return _LOCAL[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def function_path(fn: Callable[..., Any], processes: int = 1, taken: dict[str, Any] | None = None) -> str:
    """The ``module:function`` a config names ``fn`` by.

    A function defined at the top level of an importable module keeps its own path, which any process (and a later
    ``distlab train`` command) can import. Any other function (a notebook's, a lambda, a closure) is held in this
    process under ``distlab.api:NAME`` for a one-process run, and refused for several processes, which cannot import
    it. ``taken`` (name -> function, for one call) keeps two different functions of the same name apart; a function
    redefined under its old name in a later call replaces it, so a rerun cell resumes the same run.
    """
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if module and module != "__main__" and qualname.isidentifier():
        try:
            found = getattr(importlib.import_module(module), qualname)
        except (ImportError, AttributeError):
            found = None
        if found is fn:
            return f"{module}:{qualname}"
    label = getattr(fn, "__name__", type(fn).__name__)
    if processes > 1:
        raise DistlabError(f"{label} is defined in this session (a notebook cell, a script's __main__, a lambda or a "
                           f"nested function), so the {processes} processes the launcher starts cannot import it; move "
                           f"it to the top level of a .py module on PYTHONPATH (e.g. my_rewards.py), import it from "
                           f"there and pass that, or train on one process (no procs/gpus)")
    key = re.sub(r"\W", "_", label).strip("_") or "function"
    taken = {} if taken is None else taken
    n, name = 1, key
    while name in taken and taken[name] is not fn:
        n += 1
        name = f"{key}_{n}"
    taken[name] = _LOCAL[name] = fn
    return f"{__name__}:{name}"


def _text(value: Any, processes: int, taken: dict[str, Any]) -> str:
    """A Python value as the override syntax the command line uses (``[a,b]``, ``true``, ``null``)."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (str, Path, int, float)):
        return str(value)
    if callable(value):
        return function_path(value, processes, taken)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_text(v, processes, taken) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{_text(v, processes, taken)}" for k, v in value.items()) + "}"
    raise DistlabError(f"cannot pass a {type(value).__name__} as a setting; give a number, text, true/false, a list, "
                       f"a dict or a function")


def _override_list(overrides: Sequence[str] | Mapping[str, Any] | None, processes: int,
                   taken: dict[str, Any]) -> list[str]:
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [f"{key}={_text(value, processes, taken)}" for key, value in overrides.items()]
    if isinstance(overrides, str) or not all(isinstance(item, str) for item in overrides):
        raise DistlabError("overrides must be a list of 'key=value' strings (as on the command line) or a dict "
                           "{'key': value}, e.g. ['steps=2'] or {'steps': 2}")
    return list(overrides)


def _local_functions(items: list[str]) -> bool:
    return any(f"{__name__}:" in item for item in items)


def train(recipe: str, overrides: Sequence[str] | Mapping[str, Any] | None = None, *,
          config: Sequence[str] = (), procs: int | None = None, gpus: int | None = None, smoke: bool = False,
          force: bool = False, **inputs: Any) -> dict[str, Any]:
    """Train ``recipe`` as ``distlab train RECIPE key=value ...`` does and return its summary (``summary.json``).

    ``overrides``: the command's ``key=value`` strings, or a dict (dotted keys; values may be lists, dicts and
    functions, which become their import paths). ``config``: presets or YAML files (``--config``). ``procs``/``gpus``:
    the command's ``--procs`` (CPU processes, gloo) and ``--gpus`` (CUDA, NCCL); without them one process runs in
    this one. ``smoke``: ``--smoke``. Any other keyword is a top-level config key (``reward_funcs=[my_fn]``) or an
    input the recipe takes from Python (the LM recipes: ``tasks=[{...}]``, ``eval_tasks=[...]``).

    A bad setting raises :class:`DistlabError` with the command's one-line message; a run stopped by a signal
    returns its summary with ``status: preempted`` (run the same call again to resume).
    """
    from distlab.config import composed_config, name_run, resolve_with_smoke
    from distlab.launch.launcher import LaunchOptions, world_plan
    from distlab.recipe import load_recipe

    rec = load_recipe(recipe)
    opts = LaunchOptions(gpus=gpus, procs=procs, force=force)
    nproc, pinned = world_plan(opts)
    taken: dict[str, Any] = {}
    items = _override_list(overrides, nproc, taken)
    fields = {f.name for f in dataclasses.fields(rec.config)}
    items += [f"{name}={_text(value, nproc, taken)}" for name, value in inputs.items() if name in fields]
    extra = {name: value for name, value in inputs.items() if name not in fields}
    if extra:
        hook = getattr(rec, "python_inputs", None)
        if hook is None:
            raise DistlabError(f"recipe {recipe} has no config key or input named {', '.join(sorted(extra))}; pass "
                               f"settings in overrides (distlab train {recipe} --help lists its keys)")
        # the hook writes its inputs under the run directory, which the settings name: composed only to read it
        items += hook(extra, Path(composed_config(rec, list(config), [*pinned, *items]).run.dir))
    if smoke:
        items.append("run.smoke=true")
    # resolved once, here: the launcher takes this resolution and its ranks the launcher's hand-off
    resolved = resolve_with_smoke(rec, list(config), [*pinned, *items])
    cfg = resolved[0]
    name_run(rec, cfg)  # the name the launcher would give it: known here for the summary's path
    run_dir = Path(cfg.run.dir) / cfg.run.name
    flags = [x for p in config for x in ("--config", p)]
    flags += ["--procs", str(procs)] if procs is not None else ["--gpus", str(gpus)] if gpus is not None else []
    command = shlex.join(["distlab", "train", recipe, *flags, *items])
    if _local_functions(items):  # a notebook's function: only the same call in the same session can resume
        command = f"the same distlab.train({recipe!r}, ...) call in this Python session (it names {command})"
    items.append(f"run.name={cfg.run.name}")
    if nproc == 1:
        return _in_process(rec.name, list(config), items, opts, run_dir, command, resolved)
    from distlab.launch.launcher import train as launch

    launch(recipe, list(config), items, opts, memory_check=_memory_check(), cmdline=command, resolved=resolved)
    return _summary(run_dir)


def _memory_check():
    """The doctor's memory verdict, applied before a run starts as ``distlab train`` applies it."""
    try:
        from distlab.doctor.fit import check_launch
    except ImportError:
        return None
    return check_launch


def _summary(run_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        raise DistlabError(f"the run ended without a summary in {run_dir}; see {run_dir / 'train.log'}") from None


def _in_process(recipe: str, config: list[str], items: list[str], opts: Any, run_dir: Path,
                command: str, resolved: tuple[Any, str | None]) -> dict[str, Any]:
    """One rank here: the launch path of ``distlab train``, then this process put back as it was (signal handlers,
    a pending stop request, the run's log files), so a notebook's Ctrl-C and its next run behave as before."""
    from distlab.training import session as session_module
    from distlab.launch.launcher import train as launch
    from distlab.launch.worker import EXIT_DIR_ENV

    main = threading.current_thread() is threading.main_thread()
    handlers = {sig: signal.getsignal(sig) for sig in session_module.STOP_SIGNALS} if main else {}
    with tempfile.TemporaryDirectory(prefix="distlab-api-") as exits:
        os.environ[EXIT_DIR_ENV] = exits  # the rank leaves its one-line failure here (worker._fail)
        try:
            rc = launch(recipe, config, items, opts, memory_check=_memory_check(), cmdline=command,
                        resolved=resolved)
            failure = next((p.read_text().strip() for p in Path(exits).glob("rank0-*")), None)
        finally:
            os.environ.pop(EXIT_DIR_ENV, None)
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            session_module._received.clear()
            log = logging.getLogger("distlab")
            for h in list(log.handlers):
                h.close()
                log.removeHandler(h)
    if rc == 130:  # a second Ctrl-C: stopped at once, no checkpoint of the current step
        raise KeyboardInterrupt
    if rc != 0 and failure:  # "kind: text", the line the command prints
        raise DistlabError(failure.partition(": ")[2] or failure)
    return _summary(run_dir)  # completed, or preempted by a signal (128+N): the summary says which
