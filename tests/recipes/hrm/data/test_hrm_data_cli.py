"""The argparse subcommands build loadable datasets."""

import argparse

import numpy as np

from distlab.recipes.hrm.data.cli import main, register
from distlab.recipes.hrm.data.format import load_split


def test_register_adds_three_subcommands():
    p = argparse.ArgumentParser()
    register(p.add_subparsers(dest="d"))
    args = p.parse_args(["sudoku", "--output-dir", "x", "--min-difficulty", "3"])
    assert args.min_difficulty == 3 and callable(args.func)
    assert p.parse_args(["arc", "--output-dir", "x", "--strict"]).strict


def test_cli_sudoku_and_maze_build_loadable(tmp_path):
    main(["sudoku", "--output-dir", str(tmp_path / "s"), "--train-size", "3", "--test-size", "4",
          "--min-difficulty", "2", "--num-aug", "1", "--workers", "1", "--seed", "1"])
    s = load_split(tmp_path / "s", "train")
    assert s.num_examples == 6 and np.all(s.difficulty >= 2)
    assert load_split(tmp_path / "s", "test").num_examples == 4
    main(["maze", "--output-dir", str(tmp_path / "m"), "--train-size", "2", "--test-size", "1",
          "--min-path-length", "60", "--seed", "1"])
    m = load_split(tmp_path / "m", "test")
    assert m.num_examples == 1 and m.difficulty[0] >= 60
