"""What the program may see (issue 45.1): its work dir, the interpreter and its standard library, a minimal /dev and
its own /proc; no data set, run directory, repository, home, parent environment or other process. A world-readable
copy of MBPP found by a walk of the file system gave a false pass under the read-only view alone."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sandbox_helpers import isolation_log, marker_process, outside_dir, plant_secrets, read_attacks

import distlab
from distlab.sandbox import Sandbox, runner
from distlab.sandbox.isolation import detect

REPO = str(Path(distlab.__file__).resolve().parents[2])
DEV = {"null", "zero", "full", "random", "urandom", "fd", "stdin", "stdout", "stderr", "shm"}


@pytest.fixture
def planted(shared_dir):
    """Secrets outside the temp dirs where possible (there only a minimal root hides them), and a host process and
    parent environment that hold a marker."""
    tag = uuid.uuid4().hex[:12]
    base = outside_dir() or shared_dir
    marker = f"distlab-sbx-marker-{tag}"
    os.environ["DISTLAB_SBX_MARKER"] = marker
    proc = marker_process(marker)
    try:
        yield tag, plant_secrets(base, tag), marker, base != shared_dir
    finally:
        os.environ.pop("DISTLAB_SBX_MARKER", None)
        proc.kill()
        proc.wait()
        if base != shared_dir:
            shutil.rmtree(base, ignore_errors=True)


def test_no_attack_reads_what_the_host_keeps(box, planted):
    """The data set (a planted copy and ../shared's MBPP), a run's config and checkpoint, the repository's tests,
    the homes, the parent's environment, other processes: each attack passes only if it read its target."""
    tag, secrets, marker, _ = planted
    attacks = read_attacks(tag, secrets, REPO, marker)
    results = box.run_many([job[1:] for job in attacks.values()])
    passed = {name: r.stderr_tail[-200:] for name, r in zip(attacks, results) if r.passed}
    assert passed == {}, passed


def test_the_attacks_read_their_targets_without_the_minimal_root(box, planted):
    """The same attacks, under the read-only view alone (the view before issue 45): the file system ones pass, so
    the test above fails for the right reason."""
    tag, secrets, marker, outside = planted
    if not (box.isolation.minimal_root and outside):
        pytest.skip("no minimal root here, or nowhere outside the private temp dirs to plant the secrets")
    attacks = read_attacks(tag, secrets, REPO, marker)
    names = ["dataset_leak", "run_config", "repo_tests"]
    with Sandbox(timeout_s=2.0, workers=2) as old:
        old.isolation = dataclasses.replace(old.isolation, minimal_root=False)
        results = old.run_many([attacks[n][1:] for n in names])
    assert [r.status for r in results] == ["passed"] * 3, [r.stderr_tail[-200:] for r in results]


LOOK = """import json, os, sys
top = sorted(os.listdir('/'))
dev = sorted(os.listdir('/dev'))
procs = [p for p in os.listdir('/proc') if p.isdigit()]
site = []
for d in SITE:
    try:
        site += os.listdir(d)
    except OSError:
        pass
sys.stdout.write(json.dumps({'top': top, 'dev': dev, 'procs': len(procs), 'site': site, 'cwd': os.getcwd(),
                             'env': sorted(os.environ), 'null': open('/dev/null', 'w').write('x'),
                             'random': len(open('/dev/urandom', 'rb').read(8))}))
"""


def _site_dirs(python: str) -> list[str]:
    out = subprocess.run([python, "-I", "-c", "import json, site; print(json.dumps(site.getsitepackages()))"],
                         capture_output=True, text=True, check=True, cwd="/")
    return [d for d in json.loads(out.stdout) if os.path.isdir(d) and os.listdir(d)]


def test_the_root_holds_only_what_the_program_needs(box):
    if not box.isolation.minimal_root:
        pytest.skip(f"{box.isolation.level} has no minimal root here (logged)")
    site = _site_dirs(box.isolation.python)
    r = box.run(f"SITE = {site!r}\n" + LOOK, "assert True\n")
    assert r.passed, r.stderr_tail
    seen = json.loads(r.stdout_tail)
    host_links = {n for n in os.listdir("/") if os.path.islink("/" + n)}
    # the interpreter's prefix may lie outside /usr (a venv, pyenv) and bring its top folder
    prefix_tops = {Path(os.path.realpath(p)).parts[1] for p in (sys.prefix, sys.base_prefix)}
    assert set(seen["top"]) - host_links - prefix_tops <= {"dev", "etc", "proc", "run", "tmp", "usr", "var"}, seen
    assert set(seen["dev"]) == DEV and seen["null"] == 1 and seen["random"] == 8, seen
    assert seen["procs"] <= 3, seen  # the judge, the program's process; nothing of the host's
    assert seen["site"] == [], seen  # site-packages folders are there, empty
    # what the sandbox passes, and the locale Python itself may set (PEP 538): nothing of the parent's
    assert set(seen["env"]) - {"LC_CTYPE"} == {"PATH", "HOME", "TMPDIR", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                               "OPENBLAS_NUM_THREADS"}, seen


def test_site_packages_only_when_asked():
    """sandbox.site_packages=true binds the interpreter's site-packages; a folder a .pth file adds outside the
    prefix (an editable checkout, such as this repository's src) stays out."""
    iso = detect()
    if not iso.minimal_root:
        pytest.skip(f"{iso.level} has no minimal root here (logged)")
    site = _site_dirs(iso.python)
    if not site:
        pytest.skip(f"{iso.python} has no installed packages")
    program = f"import os\nSITE = {site!r}\nseen = sum(len(os.listdir(d)) for d in SITE if os.path.isdir(d))\n" \
              f"repo = os.path.exists({REPO + '/src'!r})\n"
    with Sandbox(timeout_s=5, workers=1, site_packages=True) as box:
        r = box.run(program, "assert seen > 0 and not repo\n")
    assert r.passed, r.stderr_tail


def test_the_logged_level_says_what_is_hidden(monkeypatch):
    from distlab.sandbox import isolation
    iso, logged = isolation_log(lambda: detect())
    assert iso.minimal_root and len(logged) == 1 and logged[0][0] == "INFO", logged
    assert "a minimal root" in logged[0][1] and "no home, repository, data set or run directory" in logged[0][1]

    # a kernel that refuses the pivot: the read-only view, and a warning that the rest stays readable
    command = isolation.command

    def no_pivot(iso, *args, **kwargs):
        return [a.replace("--root", "--rootx") for a in command(iso, *args, **kwargs)]

    monkeypatch.setattr(isolation, "command", no_pivot)
    iso, logged = isolation_log(lambda: detect())
    assert iso.private_fs and not iso.minimal_root, iso
    assert logged[0][0] == "WARNING" and "WITHOUT a minimal root" in logged[0][1], logged
    assert "READABLE" in logged[0][1] and "mbpp.jsonl" in logged[0][1]


MINIMAL = """
import errno, json, os, sys
sys.path.insert(0, {lib!r})
import runner
runner.MOUNT_SETATTR = 1 << 20  # no such system call: as on a kernel before 5.12
runner._minimal_root(1, runner.__file__)
out = {{'top': sorted(os.listdir('/')), 'cwd': os.getcwd(), 'repo': os.path.exists({repo!r} + '/tests'),
       'errors': {{}}}}
for path in ('/usr/escape', '/escape', '/proc/escape', '/dev/escape', '/tmp/mine', '/run/lock/mine',
             '/dev/shm/mine', os.getcwd() + '/mine'):
    try:
        open(path, 'w').close()
        out['errors'][path] = None
    except OSError as exc:
        out['errors'][path] = errno.errorcode[exc.errno]
print(json.dumps(out))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="unshare --mount needs root")
def test_the_minimal_root_without_mount_setattr(shared_dir):
    """Before Linux 5.12 each bind is remounted read-only instead; the root is as small, the same dirs writable."""
    work = shared_dir / "work"
    work.mkdir()
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    code = MINIMAL.format(lib=str(Path(runner.__file__).parent), repo=REPO)
    p = subprocess.run(["unshare", "--pid", "--fork", "--mount", "--propagation=private", "--mount-proc", python,
                        "-I", "-S", "-c", code], capture_output=True, text=True, cwd=work, timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["cwd"] == str(work) and not out["repo"] and "home" not in out["top"], out
    errors = out["errors"]
    assert {errors.pop(k) for k in ("/usr/escape", "/escape", "/dev/escape")} == {"EROFS"}, out
    assert errors.pop("/proc/escape") in ("EROFS", "EACCES", "ENOENT"), out
    assert set(errors.values()) == {None}, out
    assert [p.name for p in work.iterdir()] == ["mine"]


def test_the_dataset_leak_of_issue_45_fails(box):
    """The attack of the issue as it ran: walk for ../shared's mbpp.jsonl and run the task's reference solution."""
    mbpp = Path(REPO).parent / "shared" / "data" / "mbpp" / "mbpp.jsonl"
    if not mbpp.is_file():
        pytest.skip(f"no MBPP copy at {mbpp}")
    attacks = read_attacks("x", {"dataset": str(mbpp), "config": "", "checkpoint": "", "run": ""}, REPO, "x")
    r = box.run(*attacks["dataset_leak_mbpp"][1:])
    assert not r.passed, r


def test_the_cli_names_the_view(tmp_path):
    """``distlab sandbox run`` said "passed in 0.98 s (namespaces)" for the leak of issue 45: it now says what the
    program could see."""
    (tmp_path / "p.py").write_text("import os\nseen = os.path.exists('/home') or os.path.exists('/root/.bashrc')\n")
    (tmp_path / "t.py").write_text("assert seen\n")
    p = subprocess.run([sys.executable, "-m", "distlab.sandbox.cli", "run", str(tmp_path / "p.py"),
                        "--tests", str(tmp_path / "t.py")], capture_output=True, text=True, timeout=120)
    iso = detect()
    assert p.returncode == 0 and p.stdout.startswith("failed in ") == iso.minimal_root, p
    assert f"({iso.level}, {iso.view})" in p.stdout, p.stdout
