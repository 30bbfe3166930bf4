"""The launcher's watch over its ranks and the run's log files, on real processes and a real full device.

The drills in ``test_faults.py`` run whole jobs; these check the backstops the drills rarely reach
(the root causes are fixed, so a stopped rank's peers time out and leave on their own) in a second.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from distlab.launch import launcher as launch
from distlab.run.logs import RunFileHandler


def _fake_rank(rank: int) -> subprocess.Popen:
    """A child of this process that looks like a rank to the watch (``RANK`` in its environment)."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            env=dict(os.environ, RANK=str(rank)), start_new_session=True)


def _wait_for_rank_env(watch: launch._Watch, procs: list[subprocess.Popen]) -> None:
    import time

    for p in procs:
        watch.add(p.pid)
    deadline = time.monotonic() + 30
    while any(watch.rank(p.pid) is None for p in procs):  # RANK is visible once the child has exec'd
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.fixture
def ranks():
    procs = [_fake_rank(0), _fake_rank(1)]
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def test_watch_ends_a_rank_stopped_past_timeout_and_names_it(ranks, capsys):
    watch = launch._Watch(timeout_s=2.0, exits_dir=None, grace_s=1.0)
    _wait_for_rank_env(watch, ranks)
    os.kill(ranks[0].pid, signal.SIGSTOP)
    import time

    deadline = time.monotonic() + 10
    while launch._proc_state(ranks[0].pid) != "T":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    watch.check(100.0)
    watch.check(102.5)  # within timeout + grace: left alone
    assert ranks[0].poll() is None and not watch.stopped
    watch.check(103.5)
    assert ranks[0].wait(10) == -signal.SIGKILL
    assert watch.stopped == {0} and ranks[1].poll() is None
    assert "rank 0" in capsys.readouterr().err


def test_watch_leaves_a_whole_job_pause_alone(ranks):
    import time

    watch = launch._Watch(timeout_s=1.0, exits_dir=None, grace_s=1.0)
    _wait_for_rank_env(watch, ranks)
    for p in ranks:
        os.kill(p.pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while any(launch._proc_state(p.pid) != "T" for p in ranks):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    for t in (100.0, 101.0, 102.0, 103.0, 104.0):
        watch.check(t)
    assert all(p.poll() is None for p in ranks) and not watch.stopped


def test_watch_ends_a_rank_that_reported_its_failure_but_lingers(ranks, tmp_path):
    watch = launch._Watch(timeout_s=600.0, exits_dir=tmp_path, grace_s=2.0)
    _wait_for_rank_env(watch, ranks)
    (tmp_path / f"rank1-pid{ranks[1].pid}").write_text("peer: timed out\n")
    watch.check(100.0)
    watch.check(101.5)
    assert ranks[1].poll() is None
    watch.check(102.5)
    assert ranks[1].wait(10) == -signal.SIGKILL and watch.hung == {1}
    assert ranks[0].poll() is None


def test_explain_blames_the_killed_rank_not_the_one_the_launcher_ended(tmp_path):
    """What the watch recorded decides: rank 0 died of the launcher's clean-up, rank 1 of an outside SIGKILL."""
    for r in (0, 1):
        (tmp_path / f"rank{r}.log").write_text(f"12:00:00 [rank{r}] INFO rank {r} pid=1 host=x\n")
    watch = launch._Watch(timeout_s=5.0, exits_dir=None)
    watch.ended = {0}
    text = launch.explain_failure({0: -9, 1: -9}, tmp_path, 5.0, watch=watch)
    assert text.startswith("rank 1 was killed by SIGKILL"), text
    watch.ended, watch.stopped = {1}, {1}
    text = launch.explain_failure({0: 1, 1: -9}, tmp_path, 5.0, watch=watch)
    assert text.startswith("rank 1 did not arrive: it was stopped"), text


def test_explain_reads_exit_lines_left_off_the_full_disk(tmp_path):
    exits = tmp_path / "exits"
    exits.mkdir()
    (exits / "rank0-pid7").write_text("error: no space left on device while writing the run directory\n")
    (exits / "rank1-pid8").write_text("peer: some rank left the job\n")
    text = launch.explain_failure({0: 2, 1: 2}, tmp_path / "run", 5.0, exits_dir=exits)
    assert text.startswith("rank 0 failed (exit code 2): no space left on device"), text
    assert "\n" not in text  # no log to quote: the reason is the last line


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_log_file_on_a_full_device_says_so_once(monkeypatch, capfd):
    monkeypatch.setattr(RunFileHandler, "_warned", False)
    log = logging.getLogger("distlab.test-full")
    log.propagate = False
    handlers = [RunFileHandler(Path("/dev/full"), 3), RunFileHandler(Path("/dev/full"), 3)]
    try:
        for h in handlers:
            log.addHandler(h)
        for i in range(5):
            log.warning("line %d", i)
    finally:
        for h in handlers:
            log.removeHandler(h)
            h.close()
    err = capfd.readouterr().err
    assert "Logging error" not in err and "Traceback" not in err, err
    assert err.count("cannot write /dev/full") == 1 and "No space left on device" in err, err
    assert all(h.broken is not None for h in handlers)


def test_exit_folders_of_killed_launchers_are_swept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"distlab-exits-{dead.pid}-abc"
    stale.mkdir()
    (stale / "rank0-pid1").write_text("crash: x\n")
    live = tmp_path / f"distlab-exits-{os.getppid()}-def"  # a launcher that is still running
    live.mkdir()
    mine = launch._exits_dir(str(tmp_path))
    assert mine is not None and mine.name.startswith(f"distlab-exits-{os.getpid()}-") and mine.is_dir()
    assert not stale.exists() and live.exists()
