"""Run (program, tests) pairs in the sandbox, many at once, and turn what happened into a :class:`SandboxResult`."""

from __future__ import annotations

import ast
import logging
import os
import queue
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from distlab.sandbox import procs, runner
from distlab.sandbox.config import SandboxConfig, check_limits, per_rank
from distlab.sandbox.isolation import command, detect, new_uids, temp_base

log = logging.getLogger("distlab")
Status = Literal["passed", "failed", "timeout", "memory", "killed", "error", "bad_tests"]
TAIL = 64 << 10  # bytes of stdout and stderr kept; the rest stays on disk (capped by the file-size limit) and goes
ENV_PATH = "/usr/local/bin:/usr/bin:/bin"
MEMORY_MARKS = (b"MemoryError", b"Cannot allocate memory", b"std::bad_alloc")
UNSHARE_NOISE = b"unshare: sigprocmask unblock failed: Invalid argument\n"  # util-linux 2.38, on a signal death


@dataclass
class SandboxResult:
    passed: bool
    status: Status
    seconds: float
    stdout_tail: str = ""
    stderr_tail: str = ""
    returncode: int | None = None


def judging_problem(tests: str) -> str | None:
    """Why ``tests`` cannot judge a program, or None: tests that do not compile would fail every program (and look
    like the program's fault); tests with no statement would pass every program."""
    try:
        tree = ast.parse(tests, "tests.py")
    except (SyntaxError, ValueError) as exc:
        where = f"line {exc.lineno}: " if getattr(exc, "lineno", None) else ""
        return f"the tests do not compile ({where}{getattr(exc, 'msg', exc)})"
    inert = (ast.Pass, ast.Expr)
    if all(isinstance(n, inert) and (isinstance(n, ast.Pass) or isinstance(n.value, ast.Constant))
           for n in tree.body):
        return "the tests hold no statement, so every program would pass"
    return None


def _tail(fh) -> bytes:
    size = fh.seek(0, os.SEEK_END)
    fh.seek(max(0, size - TAIL))
    return fh.read(TAIL)


def _status(rc: int, token_seen: bool, timed_out: bool, err: bytes) -> tuple[Status, bool]:
    """(status, suspected hack). Only exit 0 with the token is a pass; a process cannot print a token it never had."""
    if rc == runner.OK and token_seen:
        return "passed", False
    if timed_out or rc in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        return "timeout", False
    if rc == runner.MEMORY or any(m in err for m in MEMORY_MARKS):
        return "memory", False
    if rc in (runner.PROGRAM_ERROR, runner.SETUP_ERROR):
        return "error", False
    # unshare reports its child's signal death as 1 (util-linux 2.38); the runner's judge reports its host's as
    # 128 + the signal when it cannot die of that signal itself (the first process of a PID namespace)
    if rc < 0 or 128 < rc <= 128 + 64 or rc == 1 and b"unshare: " in err:
        return "killed", False
    return "failed", rc in (runner.OK, runner.EXIT_ATTEMPT, runner.UNTRUSTED)


def _precompile(python: str, path: Path) -> None:
    """Bytecode of the runner for the sandbox's interpreter, in a ``__pycache__`` beside it (root-owned, readable):
    its two processes import it instead of compiling it from source at every start. Without it they still work."""
    try:
        subprocess.run([python, "-I", "-c", "import py_compile, sys; py_compile.compile(sys.argv[1], doraise=True)",
                        str(path)], check=True, capture_output=True, timeout=60, cwd="/")
        cache = path.parent / "__pycache__"
        cache.chmod(0o755)
        for f in cache.iterdir():
            f.chmod(0o644)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("sandbox: no bytecode for the runner (%s); each run compiles it, ~15 ms per process", exc)


class Sandbox:
    """Runs model-written programs against their tests, each in a throw-away process tree (see the package doc).

    Thread-safe; ``run`` may be called from several threads, and ``run_many`` runs a batch on ``workers`` slots.
    Only ``subprocess`` (fork+exec in C, nothing Python in the child) is used, so a process that has initialised
    CUDA or runs threads can call it. ``stats`` counts runs, each status and suspected hacks (a program that exited
    without the tests completing, raised SystemExit, fed the tests an object of its own type to compare, or wrote
    something other than the runner's messages to the judge).
    """

    def __init__(self, config: SandboxConfig | None = None, **overrides) -> None:
        cfg = per_rank(replace(config or SandboxConfig(), **overrides))  # workers=0: this process has the cores
        check_limits(cfg)
        self.config = cfg
        self.isolation = detect(cfg.isolation, cfg.python)
        self.uids = new_uids(cfg.workers) if self.isolation.drop_uid else []
        self.stats: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._slots: queue.SimpleQueue[int] = queue.SimpleQueue()
        for slot in range(cfg.workers):
            self._slots.put(slot)
        self._pool: ThreadPoolExecutor | None = None
        # root-owned, others may traverse but not list; each run gets a dir inside, the program a subdir of that
        self.root = Path(tempfile.mkdtemp(prefix="distlab-sbx-", dir=temp_base(self.isolation.drop_uid)))
        self.root.chmod(0o711)
        # a folder of its own that the sandbox uids may list: imports need that, and the root hides the run dirs
        (self.root / "lib").mkdir(mode=0o755)
        (self.root / "lib").chmod(0o755)
        self.runner = self.root / "lib" / "runner.py"
        shutil.copyfile(runner.__file__, self.runner)
        self.runner.chmod(0o644)
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.root), True)
        _precompile(self.isolation.python, self.runner)

    def run(self, program: str, tests: str, timeout_s: float | None = None) -> SandboxResult:
        """Run ``program`` then ``tests`` in one namespace; passed only if every test statement completed.
        Tests that cannot judge (see :func:`judging_problem`) give status ``bad_tests`` without running anything.
        ``timeout_s``: this run's wall-clock limit instead of ``config.timeout_s`` (a limit per problem)."""
        why = judging_problem(tests)
        if why is not None:
            with self._lock:
                self.stats.update(("runs", "bad_tests"))
            return SandboxResult(False, "bad_tests", 0.0, stderr_tail=f"sandbox: {why}\n")
        slot = self._slots.get()
        try:
            result, hack = self._run(slot, program, tests, timeout_s or self.config.timeout_s)
        finally:
            self._slots.put(slot)
        with self._lock:
            self.stats.update(("runs", result.status) + (("suspected_hacks",) if hack else ()))
        return result

    def run_many(self, jobs: list[tuple[str, str]] | list[tuple[str, str, float]]) -> list[SandboxResult]:
        """Results in the order of ``jobs`` (``run``'s arguments); ``workers`` run at once."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.config.workers, thread_name_prefix="distlab-sandbox")
        return list(self._pool.map(lambda job: self.run(*job), jobs))

    def take_stats(self) -> dict[str, int]:
        """The counts since the last call, read and reset atomically (runs finish on other threads)."""
        with self._lock:
            out = dict(self.stats)
            self.stats.clear()
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
        self._cleanup()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _run(self, slot: int, program: str, tests: str, timeout_s: float) -> tuple[SandboxResult, bool]:
        cfg, iso = self.config, self.isolation
        uid = self.uids[slot] if iso.drop_uid else None
        run_dir = Path(tempfile.mkdtemp(dir=self.root))
        try:
            run_dir.chmod(0o711)
            work = run_dir / "work"
            work.mkdir(mode=0o700)
            if uid is not None:
                os.chown(work, uid, uid)
            # a uid of its own needs only its own budget; a shared one must sit above what the caller already runs.
            # +1: the runner's judge, besides the host process that runs the program (max_procs is the program's)
            per_run = cfg.max_procs + 1
            nproc = per_run if uid is not None else per_run * cfg.workers + procs.tasks_of_uid(os.getuid())
            argv = command(iso, str(self.runner), timeout_s=timeout_s, memory_mb=cfg.memory_mb, nproc=nproc,
                           max_file_mb=cfg.max_file_mb, max_open_files=cfg.max_open_files, uid=uid,
                           site_packages=cfg.site_packages)
            env = {"PATH": ENV_PATH, "HOME": str(work), "TMPDIR": str(work), "OMP_NUM_THREADS": "1",
                   "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
            token = secrets.token_hex(16)
            code = program.encode("utf-8", "replace")
            payload = b"%s\n%d\n%s%s" % (token.encode(), len(code), code, tests.encode("utf-8", "replace"))
            with open(run_dir / "stdout", "w+b") as out, open(run_dir / "stderr", "w+b") as err:
                start = time.monotonic()
                proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=err, cwd=work, env=env,
                                        start_new_session=True)
                timed_out = False
                try:
                    try:
                        proc.stdin.write(payload)
                        proc.stdin.close()
                    except OSError:  # it died before reading all of it: its status says why
                        try:
                            proc.stdin.close()
                        except OSError:
                            pass
                    timed_out = not procs.wait_for(proc, max(0.0, start + timeout_s - time.monotonic()))
                finally:
                    if proc.returncode is None:
                        procs.kill_tree(proc, iso.namespaced)
                seconds = time.monotonic() - start
                if not iso.namespaced:  # without a PID namespace, leftovers must be hunted down
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except OSError:
                        pass
                    if uid is not None:
                        procs.kill_uid(uid)
                stdout, stderr = _tail(out), _tail(err)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
        mark = token.encode()
        seen = mark in stdout
        status, hack = _status(proc.returncode, seen, timed_out, stderr)
        text = stdout.replace(b"\n" + mark + b"\n", b"").replace(mark, b"").decode("utf-8", "replace")
        return SandboxResult(status == "passed", status, round(seconds, 4), text,
                             stderr.replace(UNSHARE_NOISE, b"").decode("utf-8", "replace"), proc.returncode), hack
