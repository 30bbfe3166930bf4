"""1,000 runs of honest programs and attacks, shuffled, on parallel slots: no false pass, no escape, nothing left.

The token attacks (frames, gc, inspect, tracebacks, /proc, ptrace, a patched math.isclose) each passed or could pass
when the program shared an interpreter with the runner's token; see ``sandbox_helpers.TOKEN_ATTACKS``. The file
system attacks (files in /tmp, /var/tmp, /dev/shm and /run/lock, a Unix socket in /tmp, System V shared memory,
connecting to the host's Unix sockets, writing into the repository or a run directory) each got out when the
sandbox shared the host's file system; see ``sandbox_helpers.fs_attacks``. The read attacks (a data set's reference
solution found by a walk, a run's config and checkpoint, the repository's tests, the homes, the parent's environment,
other processes' /proc) each passed, the first four under the read-only view alone; see
``sandbox_helpers.read_attacks``.
"""

import os
import random
import shutil
import socket
import time
import uuid
from collections import Counter
from pathlib import Path

from sandbox_helpers import (ESCAPE, TOKEN_ATTACKS, accepted, fs_attacks, fs_escapes, leftovers, listen_unix,
                             make_run_dir, marker_process, my_zombies, outside_dir, plant_secrets, read_attacks)

import distlab
from distlab.sandbox import Sandbox

RUNS = 1000
ADD = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"
TESTS = "assert add(2, 3) == 5\nassert add(-1, 1) == 0\n"
REPO = str(Path(distlab.__file__).resolve().parents[2])
FS_RUNS = {"temp_files": 20, "unix_socket_in_tmp": 16, "sysv_shm": 12, "unix_socket_connect": 20, "write_repo": 16,
           "write_run_dir": 16, "nested_userns": 10}
READ_RUNS = {"dataset_leak": 12, "dataset_leak_mbpp": 12, "run_config": 10, "repo_tests": 10, "homes": 10,
             "parent_env": 8, "proc_others": 8}


def _kinds(port: int, marker_dir: str, precious: str, fs: dict, read: dict) -> dict[str, tuple[int, bool, str, str]]:
    """name -> (how many, may it pass, program, tests). A pass of a 'may not' kind is a false pass."""
    liar = "class L:\n    def __eq__(s, o): return True\n    def __bool__(s): return True\n"
    # 8 of each token attack (16 kinds), taken from the honest, wrong and exit kinds; the file system attacks (110
    # runs) from the honest, wrong and syntax kinds; the read attacks (70 runs, or 58 without ../shared's MBPP) from
    # the honest kind
    attacks = {f"token_{name}": (8, False, *job) for name, job in TOKEN_ATTACKS.items()}
    attacks.update({f"fs_{name}": (FS_RUNS[name], *job) for name, job in fs.items()})
    attacks.update({f"read_{name}": (READ_RUNS[name], *job) for name, job in read.items()})
    honest = 180 - sum(READ_RUNS[name] for name in read)
    return {
        "honest": (honest, True, ADD, TESTS),
        "wrong": (22, False, WRONG, TESTS),
        "syntax": (20, False, "def add(a, b)\n    return a + b\n", TESTS),
        "sys_exit": (30, False, WRONG + "import sys\nsys.exit(0)\n", TESTS),
        "os_exit": (30, False, WRONG + "import os\nos._exit(0)\n", TESTS),
        "exit_in_tests": (20, False, "import os\ndef add(a, b):\n    os._exit(0)\n", TESTS),
        "always_equal": (40, False, liar + "def add(a, b):\n    return L()\n", TESTS),
        "truthy": (20, False, liar + "def add(a, b):\n    return L()\n", "assert add(1, 1)\n"),
        "int_subclass": (20, False, "class I(int):\n    def __eq__(s, o): return True\n"
                                    "def add(a, b):\n    return I(0)\n", TESTS),
        "patch_builtins": (30, False, WRONG + "import builtins\nbuiltins.exec = lambda *a, **k: None\n"
                                              "builtins.all = lambda *a: True\n", TESTS),
        "patch_operator": (20, False, WRONG + "import operator\noperator.eq = lambda a, b: True\n", TESTS),
        "patch_runner": (20, False, WRONG + "import __main__\n__main__.CMP = 'x'\n"
                                            "def __sbx_cmp__(*a):\n    return True\n", TESTS),
        "tracer": (20, False, WRONG + "import sys\ndef t(f, e, a):\n    def j(f, e, a):\n"
                                      "        if e == 'line' and f.f_lineno < 3:\n            f.f_lineno = 3\n"
                                      "        return j\n    return j if f.f_code.co_filename == 'tests.py' else None\n"
                                      "sys.settrace(t)\n", TESTS + "pass\n"),
        "memory": (50, False, "x = bytearray(8 << 30)\n" + ADD, TESTS),
        "flood": (30, False, ADD + "import sys\nsys.stdout.write('x' * (2 << 20))\n", TESTS),
        "network": (40, False, "import socket\nok = False\ntry:\n"
                               f"    socket.create_connection(('127.0.0.1', {port}), timeout=0.2)\n    ok = True\n"
                               "except OSError:\n    pass\n", "assert ok\n"),
        "delete_file": (40, False, f"import os\nok = False\ntry:\n    os.remove({precious!r})\n    ok = True\n"
                                   "except OSError:\n    pass\n", "assert ok\n"),
        # the marker dir is out of reach now (private /tmp, read-only elsewhere): a daemon that survived would
        # still be sleeping when the battery ends, and be found among the leftovers
        "daemon": (40, True, "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                             "        time.sleep(0.3)\n        import uuid\n        try:\n"
                             f"            open({marker_dir!r} + '/' + uuid.uuid4().hex, 'w').write('x')\n"
                             "        except OSError:\n            pass\n        time.sleep(60)\n"
                             "    os._exit(0)\n", "assert True\n"),
        "sleepers": (30, True, "import os, time\nfor _ in range(5):\n    if os.fork() == 0:\n"
                               "        time.sleep(30)\n        os._exit(0)\n", "assert True\n"),
        "kill_parent": (30, True, "import os\nos.kill(os.getppid(), 9)\nos.kill(-1, 9)\n", "assert True\n"),
        "loop": (12, False, "while True:\n    pass\n", TESTS),
        "sleep": (12, False, "import time\ntime.sleep(100)\n", TESTS),
        "fork_bomb": (6, False, "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
                                "        pass\n", TESTS),
        **attacks,
    }


def test_thousand_runs_no_false_pass_no_escape_nothing_left(shared_dir):
    markers = shared_dir / "markers"
    markers.mkdir()
    markers.chmod(0o777)  # writable by the slot uids, were it not for the private /tmp
    precious = shared_dir / "precious.txt"
    precious.write_text("keep")
    precious.chmod(0o644)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    server.setblocking(False)
    tag, outside = uuid.uuid4().hex[:12], outside_dir()
    run_dir = make_run_dir(outside or shared_dir)  # anyone may write it: only the read-only view keeps it intact
    sockets = [str(shared_dir / f"{ESCAPE}{tag}.sock")] + \
        ([f"/run/{ESCAPE}{tag}.sock"] if os.access("/run", os.W_OK) else [])
    unix_servers = [listen_unix(path) for path in sockets]
    marker = f"distlab-sbx-marker-{tag}"
    os.environ["DISTLAB_SBX_MARKER"] = marker  # the parent's environment: the program must not see it
    marked = marker_process(marker)
    planted = plant_secrets(Path(run_dir).parent / "planted", tag)
    kinds = _kinds(server.getsockname()[1], str(markers), str(precious),
                   fs_attacks(tag, sockets, REPO, str(run_dir)), read_attacks(tag, planted, REPO, marker))
    assert sum(k[0] for k in kinds.values()) == RUNS
    jobs = [name for name, (n, *_) in kinds.items() for _ in range(n)]
    random.Random(0).shuffle(jobs)
    try:
        with Sandbox(timeout_s=0.75, workers=6, max_procs=16, max_file_mb=1, memory_mb=256) as box:
            start = time.monotonic()
            results = box.run_many([kinds[name][2:] for name in jobs])
            elapsed = time.monotonic() - start
            time.sleep(0.5)  # daemons that escaped would write their marker by now
            left = leftovers(box)
            left_files = [p.name for p in box.root.iterdir() if p.name != "lib"]  # run dirs not removed
            stats = dict(box.stats)
        left_files += [str(box.root)] if box.root.exists() else []
        try:
            server.accept()
            connected = True
        except BlockingIOError:
            connected = False
        unix_connected = accepted(unix_servers)
        escaped = fs_escapes(tag, REPO, str(run_dir))
    finally:
        os.environ.pop("DISTLAB_SBX_MARKER", None)
        marked.kill()
        marked.wait()
        server.close()
        for unix_server, path in zip(unix_servers, sockets):
            unix_server.close()
            os.remove(path)
        if outside is not None:
            shutil.rmtree(outside, ignore_errors=True)
    by_kind: dict[str, Counter] = {}
    for name, r in zip(jobs, results):
        by_kind.setdefault(name, Counter())[r.status] += 1
    false_passes = [(name, r) for name, r in zip(jobs, results) if r.passed and not kinds[name][1]]
    summary = {name: dict(c) for name, c in by_kind.items()}
    classes = Counter(name.split("_")[0] if name.startswith(("token_", "fs_", "read_")) else
                      "honest" if name == "honest" else "other" for name in jobs)
    escapes = len(escaped) + unix_connected + len(list(markers.iterdir())) + connected + \
        (precious.read_text() != "keep")
    print(f"\n{RUNS} runs in {elapsed:.1f}s ({RUNS / elapsed:.1f}/s): {escapes} escapes, {len(false_passes)} false "
          f"passes, {len(left)} leftover processes, {len(left_files) + len(escaped)} leftover files; runs by class "
          f"{dict(classes)} ({len(kinds)} kinds); {summary}")
    assert false_passes == [], false_passes[:3]
    assert left == [] and my_zombies() == [] and left_files == []
    assert list(markers.iterdir()) == [] and not connected and precious.read_text() == "keep"
    assert escaped == [] and unix_connected == 0, (escaped, unix_connected)
    honest = by_kind["honest"]
    assert honest["passed"] >= 0.98 * kinds["honest"][0] and set(honest) <= {"passed", "timeout"}, summary
    assert by_kind["loop"] == {"timeout": 12} and by_kind["sleep"] == {"timeout": 12}, summary
    assert by_kind["memory"] == {"memory": 50}, summary
    # the exits, liars and the 14 token attacks that exit 0 (each one is an exit attempt now)
    assert stats["runs"] == RUNS and stats["suspected_hacks"] >= 30 + 30 + 20 + 40 + 20 + 14 * 8, stats
    for name in TOKEN_ATTACKS:
        # reading all of its own memory may take longer than 0.75 s on a busy machine: a timeout is no pass either
        assert set(by_kind[f"token_{name}"]) <= {"failed", "timeout"}, (name, by_kind[f"token_{name}"])
    for name in ("temp_files", "unix_socket_in_tmp", "sysv_shm"):  # private, so these work for the program
        assert by_kind[f"fs_{name}"]["passed"] >= 0.9 * FS_RUNS[name], (name, by_kind[f"fs_{name}"])
    for name in ("unix_socket_connect", "write_repo", "write_run_dir", "nested_userns"):
        assert set(by_kind[f"fs_{name}"]) <= {"failed", "timeout"}, (name, by_kind[f"fs_{name}"])
    for name in READ_RUNS:  # none may read its target; the walk for the data set may run out of time
        if f"read_{name}" in by_kind:
            assert set(by_kind[f"read_{name}"]) <= {"failed", "timeout"}, (name, by_kind[f"read_{name}"])
