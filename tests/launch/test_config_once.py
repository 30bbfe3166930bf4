"""The run config is resolved once per process: the launcher resolves it and its ranks take its hand-off; ranks
started by another launcher let rank 0 resolve and take its broadcast. Tested on real gloo ranks."""

from __future__ import annotations

import json

import pytest

from distlab.config import finalize_config, resolve_with_smoke, to_yaml
from distlab.errors import DistlabError
from distlab.launch.handoff import ResolvedRun, read_handoff, write_handoff
from distlab.recipe import load_recipe
from mp import run_ranks

CPU = ["dist.device=cpu", "dist.backend=gloo"]
SCALED = [*CPU, "global_batch_size=64", "lr=0.01", "scale.batch=linear", "scale.lr=sqrt", "run.smoke=true"]


def _counting(module, name: str, calls: list[str]):
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(name)
        return real(*args, **kwargs)

    setattr(module, name, counted)


def _agree(rank: int, world_size: int, overrides: list[str], handoff: str | None):
    """One rank's ``worker.agree_config`` (the process group is up already: it joins that one), with every
    resolution, composition and finalization this process runs counted."""
    from distlab.launch import worker
    calls: list[str] = []
    for name in ("resolve_with_smoke", "composed_config", "finalize_config", "read_handoff"):
        _counting(worker, name, calls)
    try:
        run, cfg, rt = worker.agree_config(load_recipe("toy"), [], overrides, handoff)
    except DistlabError as exc:
        return {"refused": str(exc), "calls": calls}
    return {"yaml": to_yaml(cfg), "run": run, "calls": calls, "batch": cfg.global_batch_size, "lr": cfg.lr,
            "name": cfg.run.name, "world": rt.world_size}


def test_rank0_resolves_and_every_rank_takes_its_config():
    ranks = run_ranks(_agree, 2, SCALED, None)
    assert ranks[0]["calls"] == ["resolve_with_smoke", "finalize_config"]  # resolved and scaled once, here
    assert ranks[1]["calls"] == ["composed_config"]  # only read dist.* to join: no checks, no scaling, no name
    assert ranks[0]["yaml"] == ranks[1]["yaml"] and ranks[0]["run"] == ranks[1]["run"]
    assert ranks[0]["batch"] == ranks[1]["batch"] == 128  # scaled once for 2 ranks, not once per rank
    assert ranks[1]["lr"] == pytest.approx(0.01 * 2 ** 0.5)
    assert ranks[1]["name"].startswith("toy-")  # rank 0 named the run
    assert ranks[1]["run"].smoke.startswith("run.smoke:")  # what rank 0 logs, decided where it was resolved
    assert [s["key"] for s in ranks[1]["run"].scaling] == ["global_batch_size", "lr"]


def test_a_config_rank0_refuses_is_refused_on_every_rank_with_its_line():
    ranks = run_ranks(_agree, 2, [*CPU, "run.name=../elsewhere"], None)
    assert ranks[0]["refused"] == ranks[1]["refused"]
    assert "run.name='../elsewhere' is not a plain directory name" in ranks[1]["refused"]
    assert ranks[1]["calls"] == ["composed_config"]


def test_ranks_of_the_launcher_take_its_handoff_and_resolve_nothing(tmp_path):
    recipe = load_recipe("toy")
    cfg, smoke = resolve_with_smoke(recipe, [], SCALED)
    cfg, scaling = finalize_config(recipe, cfg, 2)
    path = write_handoff(tmp_path / "resolved.json", ResolvedRun(to_yaml(cfg), scaling, smoke))
    assert read_handoff(path) == ResolvedRun(to_yaml(cfg), scaling, smoke)
    ranks = run_ranks(_agree, 2, ["this=would-not-even-compose"], str(path))
    assert [r["calls"] for r in ranks] == [["read_handoff"], ["read_handoff"]]
    assert ranks[0]["yaml"] == ranks[1]["yaml"] == to_yaml(cfg)
    assert ranks[1]["batch"] == 128 and ranks[1]["run"].scaling == scaling  # not scaled a second time


def test_a_launch_resolves_the_config_once(tmp_path, monkeypatch):
    """``distlab train`` of one process (its rank runs in the launcher's process): the config is resolved once for
    the launcher's checks, the rank size and the run, where it used to be resolved three times."""
    from distlab.launch import launcher as launch

    calls = _count_resolutions(monkeypatch)
    overrides = [*CPU, "steps=2", "eval_examples=8", "log.progress=false", f"run.dir={tmp_path}", "run.name=once"]
    assert launch.train("toy", [], overrides, launch.LaunchOptions(procs=1)) == 0
    assert calls == ["resolve_with_smoke", "composed_config"], calls  # the composition inside that resolution
    assert (tmp_path / "once" / "summary.json").exists()


def _count_resolutions(monkeypatch) -> list[str]:
    """Every resolution and composition of the config that the launcher, its rank and the config module run from
    now on, in order."""
    from distlab import config
    from distlab.launch import launcher as launch
    from distlab.launch import worker

    calls: list[str] = []
    resolve, compose = config.resolve_with_smoke, config.composed_config
    for module in (config, launch, worker):
        monkeypatch.setattr(module, "resolve_with_smoke", _count(resolve, calls))
        if hasattr(module, "composed_config"):
            monkeypatch.setattr(module, "composed_config", _count(compose, calls, "composed_config"))
    return calls


def _count(fn, calls: list[str], name: str = "resolve_with_smoke"):
    def counted(*args, **kwargs):
        calls.append(name)
        return fn(*args, **kwargs)

    return counted


def test_the_python_api_resolves_the_config_once_and_hands_it_to_the_launcher(tmp_path, monkeypatch):
    """``distlab.train`` needs the config itself (the run's name, for its summary): it resolves it once and the
    launcher takes that resolution, where the API used to resolve it twice more around the launcher's own."""
    import distlab

    calls = _count_resolutions(monkeypatch)
    overrides = [*CPU, "steps=2", "eval_examples=8", "log.progress=false", f"run.dir={tmp_path}"]
    summary = distlab.train("toy", overrides)
    assert calls == ["resolve_with_smoke", "composed_config"], calls
    runs = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert len(runs) == 1 and runs[0].name.startswith("toy-")  # the name the API chose is the launcher's
    assert summary == json.loads((runs[0] / "summary.json").read_text())
