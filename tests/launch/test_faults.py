"""Real processes, real faults: signals to the launcher, a stopped rank, a full disk, corrupt checkpoints.

Each test runs the ``distlab`` command as a user would (toy recipe, gloo on CPU), injects one fault,
then checks what the user sees, that no process of the run is left, and (where the fault is
survivable) that rerunning the same command finishes with the uninterrupted run's parameters.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clitools import run_cli, summary  # noqa: E402

COMMON = ["steps=12", "log.every=1", "num_examples=256", "global_batch_size=16", "d_model=32",
          "eval_examples=64", "log.progress=false"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def _args(name: str, *extra: str, procs: int | None = None) -> list[str]:
    return ["train", "toy", *COMMON, f"run.name={name}", *extra] + (["--procs", str(procs)] if procs else [])


def _start(cwd: Path, args: list[str], new_session: bool = False) -> subprocess.Popen:
    """The launcher with its output going to files: a pipe nobody reads until the end blocks the
    launcher once it fills (64 KiB), which is how this suite once hung under load. ``new_session``:
    the launcher leads its own process group, as a shell's foreground job does (Ctrl-C goes to the group)."""
    name = next(a for a in args if a.startswith("run.name=")).split("=", 1)[1]
    out, err = (open(cwd / f"{name}.{kind}", "w") for kind in ("out", "err"))
    proc = subprocess.Popen([sys.executable, "-m", "distlab.cli", *args], cwd=cwd, env=ENV, stdout=out, stderr=err,
                            start_new_session=new_session)
    proc.output_files = (Path(out.name), Path(err.name))
    out.close()
    err.close()
    return proc


def _finish(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """``communicate`` for a launcher started by :func:`_start`: wait, then its stdout and stderr."""
    proc.wait(timeout=timeout)
    return tuple(f.read_text() for f in proc.output_files)


def _wait_for_ranks(run_dir: Path, ranks: int, timeout: float = 120) -> list[int]:
    """Pids of the ranks, once each has written its ``pid=`` line (i.e. it is past start-up)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        pids = []
        for r in range(ranks):
            log = run_dir / f"rank{r}.log"
            text = log.read_text() if log.exists() else ""
            if "pid=" in text:
                pids.append(int(text.split("pid=")[1].split()[0]))
        if len(pids) == ranks:
            return pids
        time.sleep(0.2)
    raise AssertionError(f"ranks of {run_dir} never started")


def _run_processes(name: str) -> list[int]:
    """Live processes whose command line belongs to run ``name`` (a /proc scan, no psutil)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"run.name={name}".encode() in cmd and state != "Z":
            found.append(int(entry))
    return found


def _assert_no_processes(name: str, within: float = 10.0) -> None:
    deadline = time.time() + within
    while _run_processes(name) and time.time() < deadline:
        time.sleep(0.2)
    assert not _run_processes(name), f"processes of run {name} left behind: {_run_processes(name)}"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("faults")


@pytest.fixture(scope="module")
def ref2(work) -> str:
    """param_checksum of the uninterrupted 2-rank run every 2-rank fault test must end with."""
    run_cli(_args("ref2", procs=2), work)
    return summary(work / "runs" / "ref2")["param_checksum"]


@pytest.fixture(scope="module")
def ref1(work) -> str:
    run_cli(_args("ref1"), work)
    return summary(work / "runs" / "ref1")["param_checksum"]


def test_sigterm_to_launcher_checkpoints_stops_and_resumes(work, ref2):
    name = "term"
    proc = _start(work, _args(name, "step_delay_s=0.4", procs=2))
    _wait_for_ranks(work / "runs" / name, 2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, err = _finish(proc, 120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and "SignalException" not in err
    assert "preempted by SIGTERM" in err and "rerun the same command" in err
    s = summary(work / "runs" / name)
    assert s["status"] == "preempted" and s["stopped_by"] == "SIGTERM" and 0 < s["step"] < 12
    _assert_no_processes(name)
    run_cli(_args(name, procs=2), work)  # the same command resumes
    assert summary(work / "runs" / name)["param_checksum"] == ref2


def test_sigkill_of_launcher_leaves_no_orphans_and_lock_names_holder(work, ref2):
    name = "kill"
    # slow steps: the second launcher below may take many seconds on a loaded machine, and the first run must still
    # be training (with a checkpoint behind it) when it is killed
    proc = _start(work, _args(name, "step_delay_s=2.0", "ckpt.every=2", procs=2))
    run_dir = work / "runs" / name
    _wait_for_ranks(run_dir, 2)
    second = run_cli(_args(name, procs=2), work, check=False, timeout=60)  # same run directory, same time
    assert second.returncode == 2
    assert f"in use by pid={proc.pid}" in second.stderr and "run.name" in second.stderr
    deadline = time.monotonic() + 120
    while not any((run_dir / "checkpoints").glob("step*")):  # older ones are pruned (ckpt.keep)
        assert time.monotonic() < deadline, "the first run never wrote a checkpoint"
        time.sleep(0.2)
    assert proc.poll() is None, "the first run ended before it could be killed"
    proc.kill()
    _finish(proc, 30)
    _assert_no_processes(name)  # the ranks died with their launcher
    run_cli(_args(name, procs=2), work)  # lock released by the kernel; resumes from the last checkpoint
    assert summary(run_dir)["param_checksum"] == ref2
    assert "resumed from" in (run_dir / "rank0.log").read_text()


def test_sigusr1_to_launcher_is_a_clean_preemption(work):
    name = "usr1"
    proc = _start(work, _args(name, "step_delay_s=0.4", procs=2))
    _wait_for_ranks(work / "runs" / name, 2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGUSR1)
    _, err = _finish(proc, 120)
    assert proc.returncode == 128 + signal.SIGUSR1 and "Traceback" not in err
    s = summary(work / "runs" / name)
    assert s["status"] == "preempted" and s["stopped_by"] == "SIGUSR1"
    assert (work / "runs" / name / "checkpoints" / f"step{s['step']:08d}").is_dir()
    _assert_no_processes(name)


def test_ctrl_c_single_process_checkpoints_and_resumes(work, ref1):
    name = "int1"
    proc = _start(work, _args(name, "step_delay_s=0.4"))
    _wait_for_ranks(work / "runs" / name, 1)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = _finish(proc, 120)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert summary(work / "runs" / name)["stopped_by"] == "SIGINT"
    run_cli(_args(name), work)
    assert summary(work / "runs" / name)["param_checksum"] == ref1


def test_sigusr2_prints_where_a_rank_is_and_the_run_goes_on(work, ref1):
    name = "usr2"
    proc = _start(work, _args(name, "step_delay_s=0.4"))
    pid = _wait_for_ranks(work / "runs" / name, 1)[0]
    time.sleep(1.0)
    os.kill(pid, signal.SIGUSR2)
    _, err = _finish(proc, 120)
    assert proc.returncode == 0, err
    assert "most recent call first" in err and "distlab/" in err.split("most recent call first", 1)[1]
    s = summary(work / "runs" / name)
    assert s["status"] != "preempted" and s["step"] == 12 and s["param_checksum"] == ref1


# The drills below inject one fault into a 2-rank job, five times each: a drill that passes 3 runs of 5
# is a failing drill. Each bounds how long the job may take to end and checks that no process is left.
DRILL_TIMEOUT_S = 5  # dist.timeout_s of the drills (any value > 0 is allowed)
ATTEMPTS = range(5)


def _drill(work: Path, name: str, *extra: str, new_session: bool = False) -> tuple[subprocess.Popen, list[int]]:
    """A 2-rank job far from its end (400 slow steps), once both ranks are training."""
    proc = _start(work, _args(name, "steps=400", "step_delay_s=0.3", f"dist.timeout_s={DRILL_TIMEOUT_S}", *extra,
                              procs=2), new_session=new_session)
    try:
        pids = _wait_for_ranks(work / "runs" / name, 2)
    except BaseException:
        _end_drill(proc, [])
        raise
    time.sleep(0.5)
    return proc, pids


def _end_drill(proc: subprocess.Popen, pids: list[int]) -> None:
    """After a drill, pass or fail: nothing of it may keep running (a stopped rank dies of SIGKILL too)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(30)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _fault_drill(work: Path, name: str, fault, *, new_session: bool = False
                 ) -> tuple[subprocess.Popen, str, float]:
    """Start a drill, apply ``fault(proc, pids)``, wait for the launcher: ``(proc, stderr, seconds to end)``;
    whatever happens, nothing of the drill keeps running."""
    proc, pids = _drill(work, name, new_session=new_session)
    try:
        fault(proc, pids)
        t0 = time.monotonic()
        _, err = _finish(proc, 120)
        took = time.monotonic() - t0
        print(f"drill {name}: ended {took:.1f} s after the fault, exit status {proc.returncode}")
    finally:
        _end_drill(proc, pids)
    return proc, err, took


def _last_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("distlab: error:")]
    assert lines, f"no 'distlab: error:' line in:\n{err}"
    return lines[-1]


@pytest.mark.parametrize("attempt", ATTEMPTS)
@pytest.mark.parametrize("victim", [0, 1])
def test_stopped_rank_ends_the_job_and_is_named(work, victim, attempt):
    """SIGSTOP of either rank: the job ends within dist.timeout_s plus a bounded grace, naming that rank.

    Stopping rank 0 used to hang 2 runs in 5: rank 1 logged its timeout and then deadlocked freeing the
    gloo group (the group's destructor joins gloo's thread while holding the GIL that thread waits for).
    """
    from distlab.launch.launcher import WATCH_GRACE_S

    name = f"stop{victim}-{attempt}"
    proc, err, took = _fault_drill(work, name, lambda proc, pids: os.kill(pids[victim], signal.SIGSTOP))
    assert proc.returncode == 2, err
    line = _last_error(err)
    assert f"rank {victim} did not arrive: it was stopped" in line and f"rank{victim}.log" in line, line
    assert "Traceback" not in err
    assert took < DRILL_TIMEOUT_S + WATCH_GRACE_S + 15, f"the job took {took:.0f} s to end"
    _assert_no_processes(name)


@pytest.mark.parametrize("attempt", ATTEMPTS)
def test_killed_rank_is_blamed_not_the_peer_it_took_down(work, attempt):
    """kill -9 of rank 1: the launcher names rank 1 and the signal, never rank 0 (which died of it)."""
    name = f"kill9-{attempt}"
    proc, err, took = _fault_drill(work, name, lambda proc, pids: os.kill(pids[1], signal.SIGKILL))
    assert proc.returncode == 2, err
    line = _last_error(err)
    assert line.startswith("distlab: error: rank 1 was killed by SIGKILL"), line
    verdicts = [ln for ln in err.splitlines() if ln.startswith("distlab: error:")]  # rank 0's own log may say why
    assert not [ln for ln in verdicts if "rank 0" in ln.split(";")[0]], err  # it died, but never as the cause
    assert "Traceback" not in err
    assert took < DRILL_TIMEOUT_S + 15, f"the job took {took:.0f} s to end"
    _assert_no_processes(name)


@pytest.mark.parametrize("attempt", ATTEMPTS)
def test_double_ctrl_c_exits_130_leaving_nothing(work, attempt):
    """Two SIGINTs (to the launcher's process group, as a terminal sends them, or to the launcher alone),
    close together or apart: exit status 130, one line, no process left."""
    delay = (0.0, 0.1, 0.3, 0.6, 1.0)[attempt]
    to_group = attempt % 2 == 0
    name = f"int2-{attempt}"

    def twice(proc, pids) -> None:
        for wait in (delay, 0.0):
            if to_group:
                os.killpg(proc.pid, signal.SIGINT)
            else:
                proc.send_signal(signal.SIGINT)
            time.sleep(wait)

    proc, err, took = _fault_drill(work, name, twice, new_session=to_group)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "Traceback" not in err and "SignalException" not in err and "KeyboardInterrupt" not in err
    last = err.strip().splitlines()[-1]
    assert "stopped at once by a second SIGINT" in last or "preempted by SIGINT" in last, last
    assert took < 30, f"the launcher took {took:.0f} s to stop"
    _assert_no_processes(name)


def _tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount tmpfs here: {r.stderr.strip()}")


def test_disk_full_says_so_leaves_no_temp_and_resumes(work, ref1):
    disk = work / "small"
    _tmpfs(disk, "900k")
    try:
        args = _args("full", "ckpt.every=1", "ckpt.keep_last=5", f"run.dir={disk}")
        p = run_cli(args, work, check=False)
        assert p.returncode != 0 and "no space left on device" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr
        assert not list((disk / "full" / "checkpoints").glob(".tmp-step*")), "half-written checkpoint left"
        _assert_no_processes("full")
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)  # the user frees space
        run_cli(args, work)
        assert summary(disk / "full")["param_checksum"] == ref1
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


@pytest.mark.parametrize("free_pages", [0, 1, 2, 3, 4])
def test_disk_full_from_the_start_is_one_clear_line(work, free_pages):
    """The run's disk is full before the job starts (0 to 4 pages left: the lock, the run directory or the
    logs are the first write to fail): no logging tracebacks, the last line says no space, and the job
    ends at once. Once the rank logs could not be written, the launcher still names the rank and its
    reason (the ranks also leave their exit line off the run's disk)."""
    disk = work / f"full{free_pages}"
    _tmpfs(disk, "256k")
    name = f"full{free_pages}"
    try:
        with open(disk / "filler", "wb") as f:
            f.write(b"\0" * (64 - free_pages) * 4096)
        t0 = time.monotonic()
        p = run_cli(_args(name, f"run.dir={disk}", f"dist.timeout_s={DRILL_TIMEOUT_S}", procs=2), work,
                    check=False, timeout=120)
        took = time.monotonic() - t0
        print(f"drill {name}: failed in {took:.1f} s, exit status {p.returncode}")
        assert p.returncode == 2, p.stderr
        assert "Traceback" not in p.stderr and "Logging error" not in p.stderr, p.stderr
        assert "no space left on device" in _last_error(p.stderr), p.stderr
        assert "no space left on device" in p.stderr.strip().splitlines()[-1], p.stderr
        assert p.stderr.count("cannot write") <= 2, p.stderr  # at most one line per rank about its log
        assert took < 60, f"the job took {took:.0f} s to fail"
        _assert_no_processes(name)
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_all_checkpoints_corrupt_fails_unless_fresh(work, ref1):
    name = "corrupt"
    run_dir = work / "runs" / name
    run_cli(_args(name, "run.stop_at=4", "ckpt.every=2"), work)
    for shard in (run_dir / "checkpoints").glob("step*/*.distcp"):
        shard.write_bytes(shard.read_bytes()[:10])
    stale = run_dir / "checkpoints" / ".tmp-step00000006"
    stale.mkdir()
    p = run_cli(_args(name), work, check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    line = p.stderr.strip().splitlines()[-1]
    assert "every checkpoint" in line and "step00000004" in line and "run.resume=fresh" in line
    assert not stale.exists(), "stale temporary checkpoint not cleaned at start"
    run_cli(_args(name, "run.resume=fresh"), work)
    assert summary(run_dir)["param_checksum"] == ref1
    assert list(run_dir.glob("checkpoints.discarded-*/step00000004")), "old checkpoints were not kept aside"


def test_eval_verifies_and_never_touches_the_run(work, ref1):
    run_dir = work / "runs" / "ref1"
    before = {f: (run_dir / f).read_bytes() for f in ("config.yaml", "manifest.json", "summary.json")}
    run_cli(["eval", str(run_dir)], work)
    assert (run_dir / "eval" / "step00000012" / "eval.json").exists()
    assert {f: (run_dir / f).read_bytes() for f in before} == before
    bad = work / "runs" / "evalbad"
    shutil.copytree(run_dir, bad, ignore=shutil.ignore_patterns("eval"))
    shard = next((bad / "checkpoints" / "step00000012").glob("*.distcp"))
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF  # same size, different content: only the hash can tell
    shard.write_bytes(bytes(data))
    p = run_cli(["eval", str(bad / "checkpoints" / "step00000012")], work, check=False)
    assert p.returncode == 2 and "cannot be trusted" in p.stderr and "corrupted" in p.stderr
    assert not (bad / "eval").exists(), "a refused checkpoint was scored anyway"
    assert json.loads((bad / "summary.json").read_text()) == json.loads(before["summary.json"])
