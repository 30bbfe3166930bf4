"""Process checks shared by the sandbox tests (a module of its own: every test directory has a conftest)."""

import os
from pathlib import Path

from distlab.recipes.lm.sandbox import Sandbox


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
