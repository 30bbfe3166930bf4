"""The program's view of the file system (issue 32.1): private temp dirs and /run, nothing writable outside its work
dir, no Unix socket or System V shared memory of the host within reach. The test process checks the host
afterwards: a pass inside proves nothing by itself, since the private dirs are writable by design."""

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sandbox_helpers import (ESCAPE, accepted, fs_attacks, fs_escapes, isolation_log, listen_unix, make_run_dir,
                             outside_dir)

import distlab
from distlab.sandbox import Sandbox, isolation, runner
from distlab.sandbox.isolation import detect

REPO = str(Path(distlab.__file__).resolve().parents[2])


@pytest.fixture
def tag():
    return uuid.uuid4().hex[:12]


@pytest.fixture
def outside(shared_dir):
    """Where a run directory may lie: outside the private dirs (only the read-only view protects it), else /tmp."""
    d = outside_dir()
    yield d or shared_dir
    if d is not None:
        shutil.rmtree(d, ignore_errors=True)


def test_the_level_gives_a_private_file_system(box):
    assert box.isolation.private_fs == (box.isolation.level != "rlimits")


def test_temp_dirs_unix_sockets_and_shared_memory_are_private(box, tag, outside):
    """Files in /tmp, /var/tmp, /dev/shm and /run/lock, a socket in /tmp, a System V segment: all work for the
    program, and none of them is on the host afterwards."""
    attacks = fs_attacks(tag, [], REPO, str(make_run_dir(outside)))
    names = ["temp_files", "unix_socket_in_tmp", "sysv_shm"]
    results = box.run_many([attacks[name][1:] for name in names])
    assert fs_escapes(tag, REPO, str(outside / "run")) == []
    for name, r in zip(names, results):
        assert r.passed, (name, r)


def test_unix_sockets_of_the_host_are_out_of_reach(box, tag, shared_dir):
    """A socket anyone may connect to, in a directory the slot uid may traverse (under /tmp, and in /run)."""
    paths = [str(shared_dir / f"{ESCAPE}{tag}-host.sock")]
    if os.access("/run", os.W_OK):
        paths.append(f"/run/{ESCAPE}{tag}-host.sock")
    servers = [listen_unix(p) for p in paths]
    try:
        program, tests = fs_attacks(tag, paths, REPO, str(shared_dir))["unix_socket_connect"][1:]
        r = box.run(program, tests)
        got = accepted(servers)
    finally:
        for server, path in zip(servers, paths):
            server.close()
            os.remove(path)
    assert got == 0 and not r.passed and "AssertionError" in r.stderr_tail, r


def test_nothing_outside_the_work_dir_is_writable(box, tag, outside):
    """The repository and a run directory anyone may write (files, directories, sockets, appending to a metrics
    file) are refused as a read-only file system, whatever the permissions, also to a program that made itself root
    of a nested user namespace; the work dir and TMPDIR are not."""
    run = make_run_dir(outside)
    attacks = fs_attacks(tag, [], REPO, str(run))
    # read-only, or not there at all where it lies under a private dir (a checkout in /tmp)
    refused = "assert ok == [] and errs and set(errs) <= {'EROFS', 'ENOENT'}, (ok, errs)\n"
    own = ("import os, tempfile\nfor d in (os.getcwd(), tempfile.gettempdir(), os.environ['HOME']):\n"
           "    with open(os.path.join(d, 'mine.txt'), 'w') as fh:\n        fh.write('x')\n    os.mkdir(d + '/sub')\n"
           "    os.rmdir(d + '/sub')\n")
    results = box.run_many([(attacks["write_repo"][1], refused), (attacks["write_run_dir"][1], refused),
                            (own, "assert True\n"), attacks["nested_userns"][1:]])
    assert fs_escapes(tag, REPO, str(run)) == []
    for r in results[:3]:
        assert r.passed, r
    # root of a nested user and mount namespace, it cannot unmount the private /tmp or clear the read-only flag
    assert not results[3].passed and "AssertionError" in results[3].stderr_tail, results[3]


def test_the_logged_level_says_whether_the_file_system_is_private(monkeypatch):
    iso, logged = isolation_log(lambda: detect())
    assert iso.private_fs and len(logged) == 1 and logged[0][0] == "INFO"
    assert "private /tmp, /var/tmp, /dev/shm and /run" in logged[0][1], logged  # the view: test_sandbox_hidden
    iso, logged = isolation_log(lambda: detect("rlimits"))
    assert not iso.private_fs and logged[0][0] == "WARNING" and "file system is shared" in logged[0][1], logged

    # a machine that refuses the mounts: the level still works, without a private view, and says so loudly
    command = isolation.command

    def refused(iso, *args, **kwargs):
        return [a.replace("--fs=", "--fs=x") for a in command(iso, *args, **kwargs)]

    monkeypatch.setattr(isolation, "command", refused)
    iso, logged = isolation_log(lambda: detect())
    assert iso.level != "rlimits" and not iso.private_fs, iso
    assert logged[0][0] == "WARNING" and "WITHOUT a private file system" in logged[0][1], logged
    assert "/tmp, /var/tmp, /dev/shm and /run are shared" in logged[0][1]


FALLBACK = """
import errno, json, os, sys
sys.path.insert(0, {lib!r})
import runner
runner.MOUNT_SETATTR = 1 << 20  # no such system call: as on a kernel before 5.12
runner._private_fs(1, runner.__file__)
out = {{'root_ro': bool(os.statvfs('/').f_flag & os.ST_RDONLY), 'errors': {{}}}}
for path in ({repo!r} + '/escape', '/etc/escape', '/tmp/mine', '/run/lock/mine', os.getcwd() + '/mine'):
    try:
        open(path, 'w').close()
        out['errors'][path] = None
    except OSError as exc:
        out['errors'][path] = errno.errorcode[exc.errno]
print(json.dumps(out))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="unshare --mount needs root (or the userns variant below)")
@pytest.mark.parametrize("userns", [False, True])
def test_the_read_only_view_without_mount_setattr(shared_dir, userns):
    """Before Linux 5.12 there is no recursive read-only bind: each mount is remounted, keeping the flags a user
    namespace locks."""
    work = shared_dir / "work"
    work.mkdir()
    uid = 2_100_000_000 + os.getpid() % 1_000_000
    pre = []
    if userns:
        os.chown(work, uid, uid)
        pre = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", "unshare", "--user",
               "--map-root-user"]
        probe = subprocess.run([*pre, "true"], capture_output=True, cwd="/")
        if probe.returncode != 0:
            pytest.skip(f"unprivileged user namespaces are off here: {probe.stderr.decode().strip()}")
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    code = FALLBACK.format(lib=str(Path(runner.__file__).parent), repo=REPO)
    p = subprocess.run([*pre, "unshare", "--mount", "--propagation=private", python, "-I", "-S", "-c", code],
                       capture_output=True, text=True, cwd=work, timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["root_ro"], out
    # a checkout under /tmp is not there at all: the write lands in the private tmpfs (and is checked below)
    assert out["errors"].pop(f"{REPO}/escape") == "EROFS" or REPO.startswith(("/tmp/", "/var/tmp/", "/run/")), out
    assert out["errors"] == {"/etc/escape": "EROFS", "/tmp/mine": None, "/run/lock/mine": None,
                             f"{work}/mine": None}, out
    assert not Path(REPO, "escape").exists() and not Path("/etc/escape").exists()
    assert [p.name for p in work.iterdir()] == ["mine"]
