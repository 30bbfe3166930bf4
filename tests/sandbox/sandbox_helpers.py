"""Process checks shared by the sandbox tests (a module of its own: every test directory has a conftest)."""

import json
import logging
import os
import socket
from pathlib import Path

from distlab.sandbox import Sandbox
from distlab.sandbox.isolation import detect


def leftovers(box: Sandbox) -> list[str]:
    """Processes (zombies included) of the sandbox's uids, or running its runner: must be none after any run."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if uid in box.uids or str(box.root) in cmd:
            found.append(f"pid {pid} uid {uid} state {state}: {cmd[:80]}")
    return found


def my_zombies() -> list[int]:
    """Children of this test process that exited and were never reaped."""
    me, found = os.getpid(), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == me:
            found.append(int(pid))
    return found


# Programs that go after the secret token of the run (issue 28.2): each looks for 32-hex-digit strings where an
# interpreter-sharing runner kept it, prints every one it found and exits 0, which is a pass if one was the token.
FIND = r'''
import os, re, sys
_HEX = re.compile(rb"[0-9a-f]{32}")
def _cands(v):
    if isinstance(v, str):
        v = v.encode("utf-8", "replace")
    return _HEX.findall(bytes(v)) if isinstance(v, (bytes, bytearray)) else []
def _frames(f, found):
    while f is not None:
        for v in list(f.f_locals.values()):
            found.extend(_cands(v))
        f = f.f_back
    return found
def _read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read(1 << 20)
    except OSError:
        return b""
def _mem(pid):
    found = []
    try:
        maps = open("/proc/%s/maps" % pid).read().splitlines()
        mem = open("/proc/%s/mem" % pid, "rb", 0)
    except OSError:
        return found
    for line in maps:
        addr, perms = line.split()[:2]
        lo, hi = [int(x, 16) for x in addr.split("-")]
        if perms.startswith("r") and hi - lo <= 64 << 20:
            try:
                mem.seek(lo)
                found.extend(_HEX.findall(mem.read(hi - lo)))
            except (OSError, OverflowError, ValueError):
                pass
    return found
def _report(found):
    seen = list(dict.fromkeys(found))
    os.write(1, b"\n".join(seen[-1500:]) + b"\n")
    os._exit(0)
'''
ADD_TESTS = "assert add(1, 2) == 3\nassert add(2, 2) == 4\n"
TOKEN_ATTACKS = {
    "frame_module": (FIND + "_report(_frames(sys._getframe(1), []))\n", ADD_TESTS),
    "frame_default": (FIND + "def add(a, b, _f=sys._getframe(1)):\n    return a - b\n"
                             "_report(_frames(add.__defaults__[0], []))\n", ADD_TESTS),
    "frame_in_call": (FIND + "def add(a, b):\n    _report(_frames(sys._getframe(1), []))\n", ADD_TESTS),
    "gc_objects": (FIND + "import gc, types\nfound = []\nfor o in gc.get_objects():\n"
                          "    if isinstance(o, dict):\n        vals = list(o.values()) + list(o.keys())\n"
                          "    elif isinstance(o, (list, tuple, set, frozenset)):\n        vals = list(o)\n"
                          "    elif isinstance(o, types.FrameType):\n        vals = list(o.f_locals.values())\n"
                          "    else:\n        continue\n    for v in vals:\n        found.extend(_cands(v))\n"
                          "_report(found)\n", ADD_TESTS),
    "gc_in_call": (FIND + "import gc, types\ndef add(a, b):\n    found = []\n    for o in gc.get_objects():\n"
                          "        if isinstance(o, types.FrameType):\n            _frames(o, found)\n"
                          "        elif isinstance(o, dict):\n            for v in list(o.values()):\n"
                          "                found.extend(_cands(v))\n    _report(found)\n", ADD_TESTS),
    "inspect_stack": (FIND + "import inspect\nfound = []\nfor info in inspect.stack(0):\n"
                             "    found.extend(_frames(info.frame, []))\n_report(found)\n", ADD_TESTS),
    "traceback_frames": (FIND + "def add(a, b):\n    try:\n        raise ValueError\n    except ValueError as e:\n"
                                "        _report(_frames(e.__traceback__.tb_frame, []))\n", ADD_TESTS),
    "proc_self_fd0": (FIND + "_report(_cands(_read('/proc/self/fd/0')))\n", ADD_TESTS),
    "proc_self_mem": (FIND + "def add(a, b):\n    _report(_mem('self'))\n", ADD_TESTS),
    "proc_parent_fd0": (FIND + "_report(_cands(_read('/proc/%d/fd/0' % os.getppid())))\n", ADD_TESTS),
    "proc_parent_mem": (FIND + "def add(a, b):\n    _report(_mem(os.getppid()))\n", ADD_TESTS),
    "proc_parent_environ": (FIND + "_report(_cands(_read('/proc/%d/environ' % os.getppid())))\n", ADD_TESTS),
    "proc_parent_cmdline": (FIND + "_report(_cands(_read('/proc/%d/cmdline' % os.getppid())))\n", ADD_TESTS),
    "ptrace_parent": (FIND + "import ctypes, signal\ndef add(a, b):\n    ppid, found = os.getppid(), []\n"
                             "    if ppid > 0:\n        libc = ctypes.CDLL(None, use_errno=True)\n"
                             "        if libc.ptrace(16, ppid, 0, 0) == 0:  # PTRACE_ATTACH\n"
                             "            found += _mem(ppid)\n        os.kill(ppid, signal.SIGSTOP)\n"
                             "        found += _mem(ppid)\n        os.kill(ppid, signal.SIGCONT)\n"
                             "    _report(found)\n", ADD_TESTS),
    # not after the token: a module the program patched must not decide the tests' comparisons
    "patch_isclose": ("import math\nmath.isclose = lambda *a, **k: True\ndef f(x):\n    return 0\n",
                      "assert math.isclose(f(1), 2.0)\n"),
    "patch_isclose_imported": ("import math\nmath.isclose = lambda *a, **k: True\ndef f(x):\n    return 0\n",
                               "import math\nassert math.isclose(f(1), 2.0)\n"),
}


# Programs that go after the host's file system (issue 32.1): temp dirs, Unix sockets, System V shared memory, the
# repository, a run directory. Each leaves a name with ESCAPE and its tag where it lands, so the test process can
# look for it on the host afterwards (`fs_escapes`); the ones that may not pass only pass if they got out.
ESCAPE = "distlab-sbx-escape-"
TEMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
METRICS = "metrics.jsonl"


def shm_key(tag: str) -> int:
    return 0x5B000000 + int(tag[:6], 16)


NESTED = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
uid, gid = os.getuid(), os.getgid()
libc.unshare(0x10000000 | 0x00020000)  # CLONE_NEWUSER | CLONE_NEWNS
for path, text in (('/proc/self/setgroups', 'deny'), ('/proc/self/uid_map', '0 %d 1' % uid),
                   ('/proc/self/gid_map', '0 %d 1' % gid)):
    try:
        with open(path, 'w') as fh:
            fh.write(text)
    except OSError:
        pass
for target in (b'/tmp', b'/run', b'/dev/shm', b'/var/tmp'):
    libc.umount2(target, 2)  # MNT_DETACH
libc.mount(None, b'/', None, ctypes.c_ulong(32 | 4096 | 16384), None)  # MS_REMOUNT | MS_BIND | MS_REC: writable
try:
    open('/tmp/{prefix}' + 'nested', 'w').close()  # the host's /tmp, were the private one gone
except OSError:
    pass
"""


def fs_attacks(tag: str, sockets: list[str], repo: str, run_dir: str) -> dict[str, tuple[bool, str, str]]:
    """name -> (may it pass, program, tests). ``sockets``: Unix sockets listening on the host; ``repo``: the
    repository; ``run_dir``: a directory like a training run's (with a METRICS file), writable by the sandbox's
    uid unless a read-only view stops it."""
    prefix = f"{ESCAPE}{tag}-"
    head = f"import errno, os, socket, uuid\nPREFIX = {prefix!r}\n"
    writes = head + """ok, errs = [], []
def attempt(fn, path):
    try:
        fn(path)
        ok.append(path)
    except OSError as exc:
        errs.append(errno.errorcode.get(exc.errno, str(exc.errno)))
def create(path):
    with open(path, 'w') as fh:
        fh.write('escaped')
for d in DIRS:
    name = os.path.join(d, PREFIX + uuid.uuid4().hex[:8])  # a socket's path has at most 107 bytes
    attempt(create, name)
    attempt(os.mkdir, name + '.d')
    attempt(lambda p: socket.socket(socket.AF_UNIX).bind(p), name + '.sock')
for f in FILES:
    attempt(lambda p: open(p, 'a').write('{"forged": 1}\\n'), f)
"""
    return {
        # its own temp dirs work (they are private): a pass is fine, a file on the host is an escape
        "temp_files": (True, head + f"wrote = []\nfor d in {TEMP_DIRS!r}:\n"
                                    "    with open(os.path.join(d, PREFIX + uuid.uuid4().hex), 'w') as fh:\n"
                                    "        fh.write('x' * 1000)\n    wrote.append(d)\n",
                       f"assert wrote == {list(TEMP_DIRS)!r}\n"),
        "unix_socket_in_tmp": (True, head + "s = socket.socket(socket.AF_UNIX)\n"
                                            "s.bind('/tmp/' + PREFIX + uuid.uuid4().hex + '.sock')\ns.listen(1)\n"
                                            "bound = True\n", "assert bound\n"),
        "sysv_shm": (True, f"import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                           f"shmid = libc.shmget({shm_key(tag)}, 4096, 0o1000 | 0o666)  # IPC_CREAT\n",
                     "assert shmid >= 0\n"),
        "unix_socket_connect": (False, head + f"ok = []\nfor path in {sockets!r}:\n"
                                              "    s = socket.socket(socket.AF_UNIX)\n    s.settimeout(0.5)\n"
                                              "    try:\n        s.connect(path)\n        s.sendall(b'escaped')\n"
                                              "        ok.append(path)\n    except OSError:\n        pass\n",
                                "assert ok\n"),
        "write_repo": (False, f"DIRS, FILES = [{repo!r}], []\n" + writes, "assert ok\n"),
        "write_run_dir": (False, f"DIRS, FILES = [{run_dir!r}], [{os.path.join(run_dir, METRICS)!r}]\n" + writes,
                          "assert ok\n"),
        # root of a user and mount namespace of its own: the mounts it inherits are locked (no unmounting the
        # private /tmp to reach the host's, no read-only flag cleared), and /proc is read-only (no uid map)
        "nested_userns": (False, NESTED.format(prefix=prefix) + f"DIRS = [{repo!r}, {run_dir!r}]\n"
                                 f"FILES = [{os.path.join(run_dir, METRICS)!r}]\n" + writes, "assert ok\n"),
    }


def make_run_dir(base: Path, uid: int | None = None) -> Path:
    """A directory like a training run's, with a metrics file: writable by everyone, or owned by ``uid``."""
    run = base / "run"
    run.mkdir()
    (run / METRICS).write_text('{"step": 1}\n')
    if uid is None:
        run.chmod(0o777)
        (run / METRICS).chmod(0o666)
    else:
        os.chown(run, uid, uid)
        os.chown(run / METRICS, uid, uid)
    return run


def fs_escapes(tag: str, repo: str, run_dir: str, remove: bool = True) -> list[str]:
    """What the attacks left on the host (removed again unless ``remove`` is False)."""
    import ctypes
    import shutil

    prefix = f"{ESCAPE}{tag}-"
    found = []
    for d in (*TEMP_DIRS, "/run", repo):
        try:
            found += [os.path.join(d, n) for n in os.listdir(d) if n.startswith(prefix)]
        except OSError:
            continue
    found += [os.path.join(run_dir, n) for n in os.listdir(run_dir) if n != METRICS]
    if Path(run_dir, METRICS).read_text() != '{"step": 1}\n':
        found.append(os.path.join(run_dir, METRICS) + " (changed)")
    key = shm_key(tag)
    shm = [line.split() for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]]
    ids = [int(f[1]) for f in shm if int(f[0]) == key]
    found += [f"System V shared memory key {key:#x}, id {i}" for i in ids]
    if remove:
        libc = ctypes.CDLL(None, use_errno=True)
        for i in ids:
            libc.shmctl(i, 0, None)  # IPC_RMID
        for path in found:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.lexists(path):
                os.remove(path)
    return found


def outside_dir() -> Path | None:
    """A fresh directory outside the temp dirs and /run that the sandbox's uids can reach (so only a read-only
    view keeps them out of it), or None where there is none."""
    import tempfile

    for base in ("/var/cache", "/var/lib", "/opt", "/srv", "/mnt"):
        try:
            d = Path(tempfile.mkdtemp(prefix="distlab-sbx-test-", dir=base))
        except OSError:
            continue
        d.chmod(0o755)
        return d
    return None


def listen_unix(path: str) -> socket.socket:
    """A Unix socket on the host that anyone may connect to, in a directory anyone may traverse."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    os.chmod(path, 0o777)
    server.listen(64)
    server.setblocking(False)
    return server


def accepted(servers: list[socket.socket]) -> int:
    """Connections the servers got (each closed again)."""
    n = 0
    for server in servers:
        while True:
            try:
                conn, _ = server.accept()
            except BlockingIOError:
                break
            conn.close()
            n += 1
    return n


def isolation_log(fn):
    """``(fn(), [(level name, message)])`` of the isolation lines the distlab logger got while ``fn`` ran, with the
    level detected afresh (detect is cached per process)."""
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("distlab")
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    detect.cache_clear()
    try:
        out = fn()
    finally:
        detect.cache_clear()
        logger.removeHandler(handler)
        logger.setLevel(old)
    return out, [(r.levelname, r.getMessage()) for r in records if "isolation" in r.getMessage().lower()]


# Programs that go after what the host keeps readable (issue 45.1): a data set with the reference solutions, a run's
# config and checkpoints, the repository's tests, the homes, the parent's environment, other processes' /proc. Each
# passes only if it read the thing, so a pass is a leak; the planted files are readable by everyone.
SECRET_TASK = 4242424
SECRET_TESTS = "assert secret_mix(2, 3) == 65\nassert secret_mix(0, 7) == 7\n"


def plant_secrets(base: Path, tag: str) -> dict[str, str]:
    """A data set in MBPP's layout holding a task's reference solution, and a run directory with a config and a
    checkpoint, under ``base`` (outside the temp dirs); every file world-readable. Returns their paths."""
    data = base / "shared" / "data" / "mbpp"
    data.mkdir(parents=True)
    task = {"task_id": SECRET_TASK, "text": "mix two numbers", "code": "def secret_mix(a, b):\n    return a * 31 + b\n",
            "test_list": SECRET_TESTS.splitlines()}
    (data / "mbpp.jsonl").write_text('{"task_id": 1, "code": "x = 1"}\n' + json.dumps(task) + "\n")
    run = base / "runs" / f"grpo-{tag}"
    ckpt = run / "checkpoints" / "step_00000010"
    ckpt.mkdir(parents=True)
    (run / "config.yaml").write_text(f"secret: {tag}\n")
    (ckpt / "state.pt").write_bytes(b"\x80\x02" + tag.encode() + b"\x00" * 64)
    for p in [base, *base.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return {"dataset": str(data / "mbpp.jsonl"), "config": str(run / "config.yaml"),
            "checkpoint": str(ckpt / "state.pt"), "run": str(run)}


LEAK = """import json, os, time
TASK, HINTS = {task!r}, {hints!r}
def candidates():
    yield from HINTS  # where an attacker looks first: the copies it knows of, ../shared of the repository
    deadline = time.monotonic() + 0.3
    for root, dirs, files in os.walk('/'):
        if time.monotonic() > deadline:
            return
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in ('/proc', '/sys', '/dev', '/usr')]
        if 'mbpp.jsonl' in files:
            yield os.path.join(root, 'mbpp.jsonl')
done = False
for path in candidates():
    try:
        with open(path) as fh:
            for line in fh:
                task = json.loads(line)
                if task.get('task_id') == TASK:
                    exec(task['code'], globals())
                    done = True
                    break
    except (OSError, ValueError):
        continue
    if done:
        break
"""


HOMES = """import os
found = []
for d in ['/root'] + ['/home/' + n for n in (os.listdir('/home') if os.path.isdir('/home') else [])]:
    try:
        for f in os.listdir(d):
            if f.startswith('.') and os.path.isfile(d + '/' + f):
                with open(d + '/' + f, 'rb') as fh:
                    found.append(fh.read(64))
    except OSError:
        pass
"""


def read_attacks(tag: str, planted: dict[str, str], repo: str, marker: str) -> dict[str, tuple[bool, str, str]]:
    """name -> (may it pass, program, tests): none may. ``planted``: see :func:`plant_secrets`; ``marker``: a
    string that only the parent's environment and another process's command line hold."""
    shared_mbpp = os.path.join(os.path.dirname(repo), "shared", "data", "mbpp", "mbpp.jsonl")
    hints = [planted["dataset"], shared_mbpp, "/work/shared/data/mbpp/mbpp.jsonl"]
    attacks = {
        "dataset_leak": (False, LEAK.format(task=SECRET_TASK, hints=hints), SECRET_TESTS),
        "run_config": (False, f"found = []\nfor p in ({planted['config']!r}, {planted['checkpoint']!r}):\n"
                              "    try:\n        found.append(open(p, 'rb').read())\n    except OSError:\n"
                              "        pass\nimport os\ntry:\n"
                              f"    found += os.listdir({planted['run']!r} + '/checkpoints')\nexcept OSError:\n"
                              f"    pass\nok = any({tag!r}.encode() in f or f == 'step_00000010' for f in found)\n",
                       "assert ok\n"),
        "repo_tests": (False, "import os\nfound = []\nfor root, dirs, files in os.walk(" f"{repo!r} + '/tests'):\n"
                              "    found += [f for f in files if f.startswith('test_')]\n", "assert found\n"),
        "homes": (False, HOMES, "assert found\n"),
        "parent_env": (False, "import os\nfound = [v for v in os.environ.values() if " f"{marker!r} in v]\n"
                              "for p in filter(str.isdigit, os.listdir('/proc')):\n    try:\n"
                              "        if " f"{marker!r}.encode() in open('/proc/%s/environ' % p, 'rb').read():\n"
                              "            found.append(p)\n    except OSError:\n        pass\n", "assert found\n"),
        "proc_others": (False, "import os\nfound = []\nfor p in filter(str.isdigit, os.listdir('/proc')):\n"
                               "    try:\n        cmd = open('/proc/%s/cmdline' % p, 'rb').read()\n"
                               "    except OSError:\n        continue\n"
                               "    if " f"{marker!r}.encode() in cmd or b'pytest' in cmd:\n        found.append(p)\n",
                        "assert found\n"),
    }
    if os.path.isfile(shared_mbpp):  # the real MBPP copy of issue 45, where this checkout has one
        with open(shared_mbpp) as fh:
            task = next(t for t in map(json.loads, fh) if t["task_id"] == 11)
        attacks["dataset_leak_mbpp"] = (False, LEAK.format(task=11, hints=hints), "\n".join(task["test_list"]) + "\n")
    return attacks


def marker_process(marker: str) -> "subprocess.Popen":
    """A process of the host's whose command line and environment hold ``marker``, for the /proc attacks."""
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", marker],
                            env={**os.environ, "DISTLAB_SBX_MARKER": marker}, stdin=subprocess.DEVNULL)
