"""The levels a non-root caller gets (userns, rlimits), exercised by re-running as an unprivileged uid."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from sandbox_helpers import ESCAPE, accepted, fs_attacks, fs_escapes, listen_unix, make_run_dir, outside_dir

import distlab

SRC = str(Path(distlab.__file__).resolve().parents[1])
UID = 2_100_000_000 + os.getpid() % 1_000_000  # a uid of this test alone: its leftovers are easy to find

SCRIPT = """
import json, logging, sys
sys.path.insert(0, {src!r})
logged = []
handler = logging.Handler()
handler.emit = lambda record: logged.append((record.levelname, record.getMessage()))
logging.getLogger("distlab").addHandler(handler)
logging.getLogger("distlab").setLevel(logging.INFO)
from distlab.errors import DistlabError
from distlab.sandbox import Sandbox

ADD = "def add(a, b):\\n    return a + b\\n"
GOOD, BAD = "assert add(2, 2) == 4\\n", "assert add(2, 2) == 5\\n"
BOMB = "import os\\nwhile True:\\n    try:\\n        os.fork()\\n    except OSError:\\n        pass\\n"
# a daemon that survived would still be asleep when the test looks for the uid's processes
DAEMON = ("import os, time\\nif os.fork() == 0:\\n    os.setsid()\\n    if os.fork() == 0:\\n        time.sleep(2)\\n"
          "        try:\\n            open({target!r}, 'w').write('escaped')\\n        except OSError:\\n"
          "            pass\\n        time.sleep(60)\\n    os._exit(0)\\n")
NET = "import socket\\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\\n"
# root of the user namespace, the judge keeps its capabilities; the program's process must have none, and so
# cannot read the judge's memory
CAPS = ("import os\\ncaps = [l.split()[1] for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapPrm'))]\\n"
        "try:\\n    open('/proc/%d/mem' % os.getppid(), 'rb').read(1)\\n    readable = True\\n"
        "except OSError:\\n    readable = False\\n")
CAPS_TESTS = "assert caps == ['0' * 16] * 2 and not readable and os.getuid() == 0\\n"
out = {{}}
try:
    Sandbox(isolation="namespaces")
    out["namespaces"] = "granted"
except DistlabError as exc:
    out["namespaces"] = str(exc)
with Sandbox(timeout_s=1, workers=2, max_procs=16) as box:
    out["auto"] = box.isolation.level
    # the bomb alone: under userns every slot shares the caller's uid, and with it the process limit
    runs = box.run_many([(ADD, GOOD), (ADD, BAD), (DAEMON, "assert True"), (NET, "assert True"),
                         (CAPS, CAPS_TESTS)])
    runs.append(box.run(BOMB, "assert True"))
    out["auto_runs"] = [r.status for r in runs]
    out["stderr"] = [r.stderr_tail[-300:] for r in runs]
    fs = box.run_many({fs_jobs!r})
    out["fs_runs"] = [r.status for r in fs]
    out["fs_stderr"] = [r.stderr_tail[-300:] for r in fs]
with Sandbox(timeout_s=1, workers=1, isolation="rlimits") as box:
    out["rlimits_runs"] = [box.run(ADD, GOOD).status, box.run(ADD, BAD).status]
out["logged"] = logged
print(json.dumps(out))
"""


def _uid_procs() -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid == UID:
                found.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:80])
        except OSError:
            continue
    return found


@pytest.mark.skipif(os.geteuid() != 0, reason="run as non-root, the other tests already exercise these levels")
def test_userns_and_rlimits_as_an_unprivileged_user(shared_dir):
    drop = ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups", "--"]
    probe = subprocess.run([*drop, "unshare", "--user", "--map-root-user", "--pid", "--fork", "--net", "true"],
                           capture_output=True, cwd="/")
    if probe.returncode != 0:
        pytest.skip(f"unprivileged user namespaces are off here: {probe.stderr.decode().strip()}")
    shared_dir.chmod(0o777)
    target = shared_dir / "escaped"
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    # the caller's own repository and run directory, outside /tmp: only the read-only view keeps the program
    # (the caller's uid outside its user namespace) from them; a socket the caller could reach
    tag, outside = uuid.uuid4().hex[:12], outside_dir()
    base = outside or shared_dir
    repo = base / "repo"
    repo.mkdir()
    os.chown(repo, UID, UID)
    run_dir = make_run_dir(base, uid=UID)
    sock = str(shared_dir / f"{ESCAPE}{tag}.sock")
    unix_server = listen_unix(sock)
    attacks = fs_attacks(tag, [sock], str(repo), str(run_dir))
    # read-only, or not there at all where it lies under a private dir (a checkout in /tmp)
    refused = "assert ok == [] and errs and set(errs) <= {'EROFS', 'ENOENT'}, (ok, errs)\n"
    fs_jobs = [attacks[n][1:] for n in ("temp_files", "unix_socket_in_tmp", "sysv_shm", "unix_socket_connect",
                                        "nested_userns")] + \
        [(attacks[n][1], refused) for n in ("write_repo", "write_run_dir")] + \
        [(f"import os\nseen = [p for p in ({str(repo)!r}, {str(run_dir)!r}) if os.path.exists(p)]\n",
          "assert seen\n")]
    script = SCRIPT.format(src=SRC, target=str(target), port=server.getsockname()[1], fs_jobs=fs_jobs)
    try:
        p = subprocess.run([*drop, sys.executable, "-I", "-c", script], capture_output=True, text=True, cwd="/",
                           timeout=120)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout)
        with pytest.raises(socket.timeout):
            server.accept()
        unix_connected = accepted([unix_server])
        escaped = fs_escapes(tag, str(repo), str(run_dir))
    finally:
        server.close()
        unix_server.close()
        os.remove(sock)
        if outside is not None:
            shutil.rmtree(outside, ignore_errors=True)
    assert escaped == [] and unix_connected == 0, (escaped, unix_connected)
    assert out["fs_runs"] == ["passed", "passed", "passed", "failed", "failed", "passed", "passed", "failed"], \
        out["fs_stderr"]
    assert "sandbox.isolation=namespaces is not available" in out["namespaces"]
    assert out["auto"] == "userns"
    assert out["auto_runs"] == ["passed", "failed", "passed", "error", "passed", "timeout"], out["stderr"]
    assert out["rlimits_runs"] == ["passed", "failed"]
    levels = dict((msg.split()[2], lvl) for lvl, msg in out["logged"] if msg.startswith("sandbox isolation:"))
    assert levels == {"userns": "INFO"}
    assert any("private /tmp, /var/tmp, /dev/shm and /run" in msg and "a minimal root" in msg
               for _, msg in out["logged"]), out["logged"]
    assert any(lvl == "WARNING" and "rlimits only" in msg for lvl, msg in out["logged"])
    time.sleep(2.5)
    assert not target.exists()
    assert _uid_procs() == []
