"""The Python tool of ``env.name=math_tool``: a model's tool call runs in the sandbox, never in the training process,
with an import hook that admits calculation modules only; what the sandbox's confinement stops stays stopped."""

from __future__ import annotations

import pytest

from distlab.recipes.lm.envs import python_tool
from distlab.recipes.lm.envs.python_tool import ALLOWED_MODULES, run_tool
from distlab.sandbox import Sandbox


def test_a_calculation_comes_back_as_printed(box):
    assert run_tool(box, "12 * 7", 200) == python_tool.ToolResult("84", "passed")
    assert run_tool(box, "import math\nx = math.factorial(5)\nprint(x)\nx // 4", 200).output == "120\n30"


def test_import_os_fails_inside_the_sandbox(box, monkeypatch):
    runs = []
    real = Sandbox.run
    monkeypatch.setattr(Sandbox, "run", lambda self, program, tests, *a: runs.append(program) or
                        real(self, program, tests, *a))
    got = run_tool(box, "import os\nos.listdir('/')", 300)
    assert got.status == "error" and got.output.startswith("ImportError: the python tool can import only math")
    assert len(runs) == 1 and "import os" in runs[0]  # it went through the sandbox, as the program's text
    assert set(ALLOWED_MODULES) >= {"math", "fractions"} and "os" not in ALLOWED_MODULES


def test_a_write_outside_its_folder_fails_inside_the_sandbox(box, shared_dir):
    if not box.isolation.private_fs:
        pytest.skip(f"isolation level {box.isolation.level} gives the program the caller's file system, permissions "
                    f"aside")
    shared_dir.chmod(0o777)  # writable by the slot uid, were it not for the sandbox's own view of the files
    target = shared_dir / "escaped.txt"
    got = run_tool(box, f"open({str(target)!r}, 'w').write('x')", 300)
    assert got.status == "error" and ("Error" in got.output) and not target.exists()
    # and a write where it may (its own working folder) works, so the failure above is the sandbox's doing
    assert run_tool(box, "open('here.txt', 'w').write('abc')", 300) == python_tool.ToolResult("3", "passed")


def test_a_runaway_call_is_stopped_by_the_sandbox(box):
    got = run_tool(box, "while True:\n    pass", 300)
    assert got.status == "timeout" and got.output == "TimeoutError: the tool call ran longer than 1 s"


def test_long_output_keeps_its_start_and_end(box):
    got = run_tool(box, "for i in range(400):\n    print(i)", 40)
    assert got.output.startswith("0\n1\n2") and got.output.endswith("398\n399") and "\n...\n" in got.output


