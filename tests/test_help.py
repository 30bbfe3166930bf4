"""The first commands a person types answer quickly and say something useful.

Speed is checked by what gets imported, not by a stopwatch: a busy CI machine would make a timing
flaky, while "torch was not imported" is what makes ``distlab --help`` answer in well under a second.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clitools import run_cli

PROBE = """
import sys
from distlab.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:  # argparse's --help exits
    code = exc.code
print("TORCH_LOADED" if "torch" in sys.modules else "NO_TORCH", code)
"""


def _probe(args: list[str], tmp_path: Path) -> str:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("args", [["--help"], [], ["recipes"], ["train", "--help"], ["eval", "--help"],
                                  ["export", "--help"], ["doctor", "--help"], ["bench", "--help"],
                                  ["suite", "--help"], ["slurm", "--help"], ["train", "hrm", "--help"]])
def test_help_does_not_import_torch(args, tmp_path) -> None:
    out = _probe(args, tmp_path)
    assert out.strip().splitlines()[-1] == "NO_TORCH 0", out


def test_top_level_help_lists_the_commands_recipes_add(tmp_path) -> None:
    out = run_cli(["--help"], tmp_path).stdout
    for command in ("train", "eval", "export", "recipes", "data", "doctor", "bench", "suite", "backtest",
                    "sandbox"):
        assert f"    {command}" in out, out
    from distlab.recipe import recipe_names

    listed = " ".join(out.split())  # argparse wraps the help column
    assert f"train a recipe ({', '.join(recipe_names())})" in listed, out  # every installed recipe, none stale


def test_recipe_commands_still_run(tmp_path) -> None:
    out = run_cli(["data", "--help"], tmp_path).stdout
    for builder in ("sudoku", "maze", "arc"):
        assert builder in out
    assert "--start" in run_cli(["backtest", "--help"], tmp_path).stdout


def test_train_recipe_help_lists_presets_and_typed_keys(tmp_path) -> None:
    out = run_cli(["train", "hrm", "--help"], tmp_path).stdout
    assert "--dry-run" in out  # the flags are still there
    assert "demo-sudoku" in out and "trm-sudoku" in out  # every preset by name
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ") and " = " in line}
    # type, default and the comment written beside the field
    assert "int = 768" in lines["global_batch_size"]
    assert "int = 0" in lines["data.blanks"] and "easy puzzles" in lines["data.blanks"]
    assert "auto|never|must|fresh = auto" in lines["run.resume"]
    assert "not used" not in lines["dist.grad_accum"]  # HRM honours it


def test_train_recipe_help_marks_core_keys_the_recipe_refuses(tmp_path) -> None:
    out = run_cli(["train", "ppo", "--help"], tmp_path).stdout
    line = next(ln for ln in out.splitlines() if ln.split()[:1] == ["dist.grad_accum"])
    assert "not used by this recipe" in line


def test_unknown_recipe_help_is_one_line_error(tmp_path) -> None:
    proc = run_cli(["train", "hrmm", "--help"], tmp_path, check=False)
    assert proc.returncode == 2
    assert "did you mean hrm" in proc.stderr


def test_every_ppo_key_and_backtest_option_says_what_it_does(tmp_path) -> None:
    from distlab.recipes.ppo.config import HELP, PPORecipeConfig

    out = run_cli(["train", "ppo", "--help"], tmp_path).stdout
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith("  ") and ln.split()}
    own = [f.name for f in __import__("dataclasses").fields(PPORecipeConfig) if f.name in HELP]
    assert len(own) >= 30
    for key in own:
        assert "  # " in lines[key] and HELP[key][:25] in lines[key], lines.get(key)
    back = run_cli(["backtest", "--help"], tmp_path).stdout
    for option, words in (("run_dir", "trained ppo run"), ("--start", "first trading day"),
                          ("--end", "last trading day"), ("--out", "default")):
        assert words in " ".join(back.split()), (option, back)
