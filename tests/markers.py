"""The test tiers, set at collection from what each test does (no hand-kept list to drift):

* ``gpu``: skipped unless CUDA is present (a ``skipif`` on ``torch.cuda.is_available()``);
* ``slurm``: uses the real local SLURM cluster (the ``slurm`` fixture);
* ``slow``: measured above ``SLOW_S`` seconds in ``durations.json`` (a full run on a quiet 2-core machine,
  refreshed by ``scripts/test_durations.py``); a test not measured yet is slow when it or one of its fixtures starts
  processes (the real command ``run_cli``, real ranks ``run_ranks``/``torch.multiprocessing``, a subprocess, a
  SLURM job) or compiles with ``torch.compile``.

``python -m pytest -q -m "not slow"`` is the contributor's fast tier; the full run (CI) has no filter.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
SLOW_S = 1.0  # a test measured longer than this leaves the fast tier
SLOW_SIGNS = ("run_cli(", "run_ranks(", "subprocess", "multiprocessing", "Popen(", "torch.compile(", "sbatch",
              "mp.spawn(", "spawn_ranks(")
MARKERS = {
    "slow": "starts processes or compiles (deselect with -m 'not slow' for the fast tier)",
    "gpu": "needs a CUDA GPU (skipped without one)",
    "slurm": "uses the real local SLURM cluster",
}


def _source(fn) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return ""


def _fixture_sources(item: pytest.Item) -> Iterable[str]:
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info else ()):
        for d in defs:
            yield _source(d.func)


def _gpu_only(item: pytest.Item) -> bool:
    return any(m.name == "skipif" and any(w in str(m.kwargs.get("reason", "")).lower() for w in ("cuda", "gpu"))
               for m in item.iter_markers())


@cache
def measured() -> dict[str, float]:
    return json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}


def _slow(item: pytest.Item, fixtures: list[str]) -> bool:
    seconds = measured().get(item.nodeid)
    if seconds is not None:
        return seconds > SLOW_S
    code = _source(getattr(item, "function", None)) + "".join(fixtures)
    return any(sign in code for sign in SLOW_SIGNS)


def _shared_fixtures(item: pytest.Item) -> set[str]:
    """The module-scoped fixtures the test's own module defines (a run trained once for the module's checks): the
    first test to use one pays its setup, so a fast test beside a slow one would inherit that cost alone."""
    info = getattr(item, "_fixtureinfo", None)
    here = getattr(getattr(item, "module", None), "__file__", None)
    out = set()
    for name, defs in (info.name2fixturedefs.items() if info else ()):
        for d in defs:
            if d.scope != "function" and here and inspect.getsourcefile(d.func) == here:
                out.add(f"{here}:{name}")
    return out


def mark(items: list[pytest.Item]) -> None:
    slow = {}
    for item in items:
        if "slurm" in item.fixturenames:
            item.add_marker(pytest.mark.slurm)
        if _gpu_only(item):
            item.add_marker(pytest.mark.gpu)
        slow[item.nodeid] = "slurm" in item.fixturenames or _slow(item, list(_fixture_sources(item)))
    # a shared fixture that a slow test uses is slow to set up: every test using it leaves the fast tier too
    heavy = {name for item in items if slow[item.nodeid] for name in _shared_fixtures(item)}
    for item in items:
        if slow[item.nodeid] or _shared_fixtures(item) & heavy:
            item.add_marker(pytest.mark.slow)
