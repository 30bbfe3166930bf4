"""``from distlab import train``: the ``distlab train`` command as a function. One process runs in this one (and
leaves its signal handlers as they were), several go through the launcher, bad input is one DistlabError line,
and a function only this session knows is refused for several processes, with the fix."""

import json
import os.path
import signal
from pathlib import Path

import pytest

from distlab import train
from distlab.api import function_path
from distlab.errors import DistlabError

QUIET = {"log.progress": False, "eval_examples": 32, "num_examples": 256}


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run_dirs(root: Path) -> list[Path]:
    return [p for p in (root / "runs").iterdir() if (p / "summary.json").exists()]


def test_toy_in_process_returns_its_summary_and_restores_this_process(here):
    before = signal.getsignal(signal.SIGINT)
    got = train("toy", {"steps": 2, **QUIET})
    assert got["status"] == "completed" and got["step"] == 2 and got["world_size"] == 1
    assert "token_accuracy" in got["eval"]
    [run] = _run_dirs(here)
    assert got == json.loads((run / "summary.json").read_text())
    assert signal.getsignal(signal.SIGINT) is before  # a notebook's Ctrl-C is its own again
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["command"].startswith("distlab train toy steps=2")  # what reruns it, not the kernel's argv
    # the same call again resumes the finished run instead of training a second one
    again = train("toy", ["steps=2", *(f"{k}={'false' if v is False else v}" for k, v in QUIET.items())])
    assert again["step"] == 2 and again["param_checksum"] == got["param_checksum"]
    assert len(_run_dirs(here)) == 1


def test_two_processes_go_through_the_launcher(here):
    got = train("toy", {"steps": 2, **QUIET}, procs=2)
    assert got["status"] == "completed" and got["step"] == 2 and got["world_size"] == 2


def test_smoke_shrinks_the_run(here):
    got = train("toy", {"log.progress": False}, smoke=True)
    assert got["step"] == 3 and got["eval"]["examples"] == 64


@pytest.mark.parametrize("call, message", [
    (lambda: train("toy", ["steps=0"]), "steps=0 is invalid"),
    (lambda: train("toy", "steps=2"), "overrides must be a list of 'key=value' strings"),
    (lambda: train("toy", {"steps": 2}, tasks=[{"prompt": "p", "tests": "t"}]), "recipe toy has no config key or "
                                                                                 "input named tasks"),
    (lambda: train("toy", {"steps": 2}, procs=2, gpus=1), "either --gpus"),
    (lambda: train("nope"), "unknown recipe 'nope'"),
])
def test_bad_input_is_one_line(here, call, message):
    with pytest.raises(DistlabError, match=message) as err:
        call()
    assert "\n" not in str(err.value)
    assert not (here / "runs").exists() or not _run_dirs(here)  # refused before any run started


def test_a_session_function_is_refused_for_several_processes_and_an_importable_one_is_named():
    def mine(prompt, completion, task):
        return 0.0

    with pytest.raises(DistlabError, match="the 2 processes the launcher starts cannot import it; move it to the top "
                                           "level of a .py module on PYTHONPATH"):
        function_path(mine, processes=2)
    with pytest.raises(DistlabError, match="cannot import it"):
        function_path(lambda **kw: 0.0, processes=4)
    assert function_path(os.path.basename, processes=2) == "posixpath:basename"  # importable: by its own path
    # one process: held here under a readable name the config's import path finds
    path = function_path(mine)
    assert path == "distlab.api:mine"
    import distlab.api

    assert getattr(distlab.api, "mine") is mine
    taken = {"mine": object()}
    assert function_path(mine, taken=taken) == "distlab.api:mine_2"  # another function of the same name in one call
