"""``distlab sandbox run``: the verdict is the output, the exit status only reports the command's own errors."""

import argparse
import json
import subprocess
import sys

import pytest

from distlab.errors import DistlabError
from distlab.sandbox.cli import add_command


def _parse(argv):
    top = argparse.ArgumentParser(prog="distlab")
    add_command(top.add_subparsers(dest="command"))
    return top.parse_args(argv)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "good.py").write_text("def sq(x):\n    return x * x\n")
    (tmp_path / "bad.py").write_text("def sq(x):\n    return x + x\n")
    (tmp_path / "tests.py").write_text("assert sq(3) == 9\n")
    return tmp_path


def test_json_verdicts_and_exit_zero_for_a_failing_program(files, capsys):
    for name, passed, status in (("good.py", True, "passed"), ("bad.py", False, "failed")):
        a = _parse(["sandbox", "run", str(files / name), "--tests", str(files / "tests.py"), "--json",
                    "--timeout", "3", "--memory-mb", "512"])
        assert a.func(a) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["passed"] is passed and out["status"] == status and isinstance(out["seconds"], float)


def test_human_line(files, capsys):
    a = _parse(["sandbox", "run", str(files / "bad.py"), "--tests", str(files / "tests.py")])
    assert a.func(a) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("failed in ") and "\n" not in line


def test_missing_file_is_the_commands_own_error(files):
    a = _parse(["sandbox", "run", str(files / "nope.py"), "--tests", str(files / "tests.py")])
    with pytest.raises(DistlabError, match="nope.py not found"):
        a.func(a)
    p = subprocess.run([sys.executable, "-m", "distlab.sandbox.cli", "run", str(files / "nope.py"),
                        "--tests", str(files / "tests.py")], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("distlab: error: program ")


def test_module_entry_point_runs_a_program(files):
    p = subprocess.run([sys.executable, "-m", "distlab.sandbox.cli", "run", str(files / "bad.py"),
                        "--tests", str(files / "tests.py"), "--json"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["status"] == "failed"
