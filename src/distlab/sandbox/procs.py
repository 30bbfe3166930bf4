"""Finding and killing a sandbox's processes through /proc (the kernel has no 'children of' call to use instead)."""

from __future__ import annotations

import os
import select
import signal
import subprocess


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def children(pid: int) -> list[int]:
    """Direct children of ``pid``; the kernel here lacks /proc/PID/task/PID/children, so scan each stat file."""
    found = []
    for p in _pids():
        try:
            with open(f"/proc/{p}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()  # the command name may hold spaces and parentheses
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(p)
    return found


def pids_of_uid(uid: int) -> list[int]:
    """Processes whose /proc entry belongs to ``uid`` (its effective uid)."""
    found = []
    for p in _pids():
        try:
            if os.stat(f"/proc/{p}").st_uid == uid:
                found.append(p)
        except OSError:
            continue
    return found


def tasks_of_uid(uid: int) -> int:
    """Threads of ``uid``: what RLIMIT_NPROC counts, so a limit for a shared uid must sit above this."""
    n = 0
    for p in pids_of_uid(uid):
        try:
            n += len(os.listdir(f"/proc/{p}/task"))
        except OSError:
            continue
    return n


def kill_uid(uid: int, rounds: int = 20) -> None:
    """SIGKILL every process of a sandbox uid, again while a fork bomb still adds some."""
    for _ in range(rounds):
        pids = pids_of_uid(uid)
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass


def wait_for(proc: subprocess.Popen, timeout: float) -> bool:
    """Reap ``proc`` if it exits within ``timeout``; True if it did.

    A pidfd wakes us the moment the process exits, where ``Popen.wait(timeout)`` polls with sleeps of up to 50 ms,
    which is most of a trivial program's run time.
    """
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        try:
            proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if not poller.poll(max(0, int(timeout * 1000))):
            return False
    finally:
        os.close(fd)
    proc.wait()
    return True


def kill_tree(proc: subprocess.Popen, namespaced: bool) -> None:
    """Kill and reap a sandbox started in its own session.

    With a PID namespace, only its first process is killed: the kernel then kills everything else in the namespace
    and ``unshare`` (our child) reaps it, so no zombie is left for init. Killing ``unshare`` first would orphan it.
    """
    if namespaced:
        for _ in range(50):
            for kid in children(proc.pid):
                try:
                    os.kill(kid, signal.SIGKILL)
                except OSError:
                    pass
            if wait_for(proc, 0.1):
                return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()
