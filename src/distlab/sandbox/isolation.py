"""Which isolation this machine allows, and the command line that applies it to one program.

Levels, strongest first:

- ``namespaces`` (root): a PID, network, IPC and mount namespace with a private /proc (``unshare``); in it the
  runner's judge, still root, gives itself a minimal root (a fresh tmpfs made the root by pivot_root, holding
  read-only binds of the interpreter's folders and standard library and of the system libraries, a /dev of five
  devices, the namespace's /proc, fresh size-limited tmpfs on /tmp, /var/tmp, /dev/shm and /run, and the program's
  work dir: no home, repository, data set or run directory exists there), then drops to a uid of its own per worker
  slot, no supplementary groups, no capabilities, no-new-privs (what ``setpriv`` did).
- ``userns`` (non-root, where unprivileged user namespaces work): the same namespaces and minimal root inside a
  user namespace; the program keeps the caller's uid outside, and the minimal root is what keeps it from the
  caller's files.
- ``rlimits``: resource limits and a session of its own only; a program that calls ``setsid`` escapes the kill at
  the deadline, it has the network, and the file system is shared (/tmp, /dev/shm, the caller's files). As root it
  still runs as a slot uid, whose leftovers are swept.

Each level is probed once by running the runner itself, with the best file system view first (see ``VIEWS``): where
the pivot is refused, the read-only view (private temp dirs, the rest read-only but READABLE); where the mounts are
refused, none. The logged level says which, and what the program can read (:func:`_log_level`).

Every level starts with ``prlimit`` (address space, CPU seconds, processes, file size, open files, no core files)
and ``setpriv --pdeathsig KILL``, and the namespace's first process gets the same signal for its own parent, so if
this process dies (SIGKILL, no cleanup) the kernel still takes every tree down.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import os
import resource
import shutil
import subprocess
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from distlab.errors import DistlabError, near_matches
from distlab.sandbox import runner as runner_module
from distlab.sandbox.runner import boot_args

log = logging.getLogger("distlab")

LEVELS = ("namespaces", "userns", "rlimits")
PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")  # tried when this interpreter is out of the uid's reach

# Slot uids: 1000 per process, placed by pid above 2**31, clear of login accounts and of sssd's AD id ranges, so
# that sandboxes in several processes on one node (one per rank) never share a uid and with it a process limit.
UID_BASE = 2_200_000_000
_uid_counter = itertools.count()


@dataclass(frozen=True)
class Isolation:
    level: str
    python: str  # an interpreter the sandbox's uid can execute
    drop_uid: bool  # root: each worker slot runs as its own unprivileged uid
    private_fs: bool = False  # private tmpfs on the temp dirs and /run, the rest read-only but the work dir
    minimal_root: bool = False  # and a root of only what the interpreter needs: the rest of the host is not there

    @property
    def view(self) -> str:
        """What of the host's file system the program sees, in the words the logged level uses."""
        if self.minimal_root:
            return "minimal root"
        return "read-only view, readable" if self.private_fs else "host file system"

    @property
    def namespaced(self) -> bool:
        """Everything the program starts lives in a PID namespace that dies with its first process."""
        return self.level != "rlimits"


def temp_base(drop_uid: bool) -> str:
    """The temp dir, unless slot uids could not traverse it (a job's private TMPDIR): then /tmp."""
    base = Path(tempfile.gettempdir()).resolve()
    if drop_uid and not all(p.stat().st_mode & stat.S_IXOTH for p in (base, *base.parents)):
        return "/tmp"
    return str(base)


def new_uids(n: int) -> list[int]:
    """``n`` uids no other sandbox of this process (nor of any other live process) is using."""
    block = UID_BASE + (os.getpid() % 2_000_000) * 1000
    return [block + next(_uid_counter) % 999 for _ in range(n)]


@functools.lru_cache(maxsize=None)
def _tool(name: str) -> str:
    path = shutil.which(name) or next((p for p in (f"/usr/bin/{name}", f"/bin/{name}") if os.access(p, os.X_OK)),
                                      None)
    if path is None:
        raise DistlabError(f"the sandbox needs util-linux's {name}, which is not on PATH "
                           f"(apt-get install util-linux, or the equivalent)")
    return path


def _below_hard(name: str, value: int) -> int:
    """Raising a hard limit needs CAP_SYS_RESOURCE, which containers often drop even for root: stay under it."""
    hard = resource.getrlimit(getattr(resource, f"RLIMIT_{name.upper()}"))[1]
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


def command(iso: Isolation, runner: str, *, timeout_s: float, memory_mb: int, nproc: int, max_file_mb: int,
            max_open_files: int, uid: int | None, site_packages: bool = False, probe: bool = False) -> list[str]:
    """The argv that runs ``runner`` under ``iso``; every wrapper execs the next, so one process per level, and
    the runner itself starts one more, the host that runs the program (``nproc`` must allow for it). The mounts
    and the drop to ``uid`` are the runner's first acts (they must come after unshare and before the drop), each
    private tmpfs as large as the largest file the program may write."""
    cpu = math.ceil(timeout_s) + 1  # above the wall-clock deadline: it only matters if the parent is gone
    hard = {"as": memory_mb << 20, "nproc": nproc, "fsize": max_file_mb << 20, "nofile": max_open_files,
            "cpu": cpu + 1}
    hard = {k: _below_hard(k, v) for k, v in hard.items()}
    argv = [_tool("prlimit"), *(f"--{k}={v}" for k, v in hard.items() if k != "cpu"),
            f"--cpu={min(cpu, hard['cpu'])}:{hard['cpu']}", "--core=0", "--",
            _tool("setpriv"), "--pdeathsig=KILL", "--"]
    namespaces = ["--pid", "--fork", "--kill-child", "--net", "--ipc", "--mount", "--propagation=private",
                  "--mount-proc", "--"]
    if iso.level == "namespaces":
        argv += [_tool("unshare"), *namespaces]
    elif iso.level == "userns":
        argv += [_tool("unshare"), "--user", "--map-root-user", *namespaces]
    args = [f"--fs={max_file_mb}"] if iso.private_fs and iso.namespaced else []
    if args and iso.minimal_root:
        args.append("--root")
    if iso.drop_uid:
        args.append(f"--uid={uid}")
    return argv + [iso.python, "-I" if site_packages else "-IS"] + boot_args(runner) + args + \
        (["--probe"] if probe else [])


def _probe(iso: Isolation, uid: int) -> str | None:
    """None if the runner, confined at this level, starts a program's process there, else why not (first line of
    its error). The runner is this package's copy (the judge reads it before it drops to ``uid``); the work dir is
    made as for a run, where the sandbox would make its own."""
    run_dir = tempfile.mkdtemp(prefix="distlab-sbx-probe-", dir=temp_base(iso.drop_uid))
    try:
        os.chmod(run_dir, 0o711)
        work = os.path.join(run_dir, "work")
        os.mkdir(work, 0o700)
        if iso.drop_uid:
            os.chown(work, uid, uid)
        argv = command(iso, os.path.realpath(runner_module.__file__), timeout_s=5, memory_mb=1 << 20,
                       nproc=1 << 20, max_file_mb=1, max_open_files=1024, uid=uid, probe=True)
        try:
            p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, cwd=work, timeout=30,
                               env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": work, "TMPDIR": work})
        except (OSError, subprocess.TimeoutExpired) as exc:
            return str(exc)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    if p.returncode == 0:
        return None
    lines = (p.stderr or p.stdout).decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else f"exit status {p.returncode}"


def _candidates(python: str) -> list[str]:
    if python:
        return [python]
    found = [sys.executable, *PYTHONS, shutil.which("python3") or ""]
    return [p for i, p in enumerate(found) if p and p not in found[:i]]


# The file system views a namespace level tries, best first: (private_fs, minimal_root).
VIEWS = ((True, True), (True, False), (False, False))


def _try_level(level: str, python: str) -> tuple[Isolation | None, str, str]:
    """(the level with the first interpreter that works, or None; why not; why its view is not the best one)."""
    root = os.geteuid() == 0
    if level == "namespaces" and not root:
        return None, "needs root (use userns)", ""
    if level == "userns" and root:
        return None, "is for non-root users (root gets namespaces, which also drops to a slot uid)", ""
    if level != "rlimits":
        _tool("unshare")
    why, uid, failed = "", new_uids(1)[0], {}
    for private_fs, minimal_root in VIEWS if level != "rlimits" else VIEWS[-1:]:
        for exe in _candidates(python):
            iso = Isolation(level, exe, root, private_fs, minimal_root)
            err = _probe(iso, uid)
            if err is None:
                return iso, "", failed.get(exe, "")  # what the same interpreter said with the better view
            failed.setdefault(exe, err)
            why = f"{exe}: {err}"
    return None, why, ""


@functools.lru_cache(maxsize=None)
def detect(requested: str = "auto", python: str = "") -> Isolation:
    """The level to use, probed once per process by running a trivial program; logged, never silently weaker."""
    if requested not in ("auto", *LEVELS):
        hint = near_matches(requested, ("auto", *LEVELS))
        raise DistlabError(f"sandbox.isolation={requested} is not one of auto, {', '.join(LEVELS)}"
                           + (f" (did you mean {hint[0]}?)" if hint else ""))
    for tool in ("prlimit", "setpriv"):
        _tool(tool)
    order = [requested] if requested != "auto" else \
        ["namespaces", "rlimits"] if os.geteuid() == 0 else ["userns", "rlimits"]
    reasons, no_fs = [], ""
    for level in order:
        try:
            iso, why, no_fs = _try_level(level, python)
        except DistlabError as exc:
            iso, why = None, str(exc)
        if iso is not None:
            break
        reasons.append(f"{level} {why}")
    else:
        raise DistlabError(f"sandbox.isolation={requested} is not available here: {'; '.join(reasons)}")
    _log_level(iso, "; ".join(reasons) or "requested", no_fs)
    return iso


READABLE = ("the rest of the file system stays READABLE as far as the uid's permissions go (home dirs, the "
            "repository, data sets such as mbpp.jsonl, run directories): a program can read reference solutions")


def _log_level(iso: Isolation, why_weak: str, why_view: str) -> None:
    """One line per level that says what the program can and cannot see: a weaker view is never silent."""
    who = "one uid per worker slot" if iso.drop_uid else f"uid {os.getuid()}"
    if iso.level == "rlimits":
        log.warning("SANDBOX ISOLATION IS WEAK: rlimits only (%s; %s). Programs can reach the network, setsid "
                    "daemons can outlive their deadline, and the file system is shared (no private /tmp, /dev/shm "
                    "or /run; files the uid may write are writable, and %s); run as root, or enable unprivileged "
                    "user namespaces.", who, why_weak, READABLE)
    elif not iso.private_fs:
        log.warning("sandbox isolation: %s (%s, %s) WITHOUT a private file system (%s): /tmp, /var/tmp, /dev/shm "
                    "and /run are shared with the host, files the uid may write are writable, and %s",
                    iso.level, who, iso.python, why_view, READABLE)
    elif not iso.minimal_root:
        log.warning("sandbox isolation: %s (%s, %s; private /tmp, /var/tmp, /dev/shm and /run, read-only elsewhere "
                    "but the work dir) WITHOUT a minimal root (%s): %s", iso.level, who, iso.python, why_view,
                    READABLE)
    else:
        log.info("sandbox isolation: %s (%s, %s; a minimal root: the program sees only its work dir, the "
                 "interpreter and its standard library (site-packages only with sandbox.site_packages=true), the "
                 "system libraries, a minimal /dev, its own /proc and private /tmp, /var/tmp, /dev/shm and /run, "
                 "read-only but the work dir and those; no home, repository, data set or run directory)",
                 iso.level, who, iso.python)
