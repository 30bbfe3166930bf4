"""Holdouts fixed in a spec (issue 51): the committed specs, the same bytes on every build, the hash that refuses a
changed generator or file, the check against a training set, and the one-line refusals of the command."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from distlab.errors import DistlabError
from distlab.recipes.hrm.data import sudoku as sd
from distlab.recipes.hrm.data.cli import main
from distlab.recipes.hrm.data.format import load_split
from distlab.recipes.hrm.data.holdout import HOLDOUTS, build_holdout, load_spec, puzzles_sha256
from distlab.recipes.hrm.data.sudoku_generate import HARD_EFFORT

ROOT = Path(__file__).resolve().parents[4]
TINY = Path(__file__).with_name("holdout_tiny.yaml")
TOP95 = ROOT.parent / "shared" / "data" / "sudoku" / "top95.txt"


def _spec(tmp_path: Path, **change) -> Path:
    data = {**yaml.safe_load(TINY.read_text()), **change}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_the_committed_generated_holdout_is_fixed_apart_from_the_training_data():
    spec = load_spec("sudoku-gen-holdout")
    assert (spec.puzzles, spec.fixed_on, spec.source) == (1000, "2026-11-28", "generate")
    assert spec.effort[0] > HARD_EFFORT  # a band of its own, harder than the training data's floor
    assert spec.stream not in (0, 1)  # the streams datasets draw their training and test puzzles from
    # its seed appears nowhere else in the code, presets, suites or benchmark scripts
    users = [p for base in ("src", "benchmarks") for p in (ROOT / base).rglob("*")
             if p.is_file() and p.suffix in (".py", ".yaml", ".sh") and str(spec.seed) in p.read_text()]
    assert users == [spec.file]
    assert "NO PRESET, SWEEP OR OTHER CHOICE MAY BE TUNED ON IT" in spec.file.read_text()


def test_committed_specs_are_named_by_their_files():
    names = sorted(p.stem for p in HOLDOUTS.glob("*.yaml"))
    assert names == ["sudoku-gen-holdout", "top95"]
    assert [load_spec(n).name for n in names] == names


def test_a_holdout_is_the_same_bytes_twice_with_an_empty_train_split(tmp_path):
    spec = load_spec(TINY)
    build_holdout(spec, tmp_path / "a", verbose=False)
    build_holdout(spec, tmp_path / "b", workers=2, verbose=False)  # the worker count changes nothing
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert a == b and "holdout.json" in a
    train, test = load_split(tmp_path / "a", "train"), load_split(tmp_path / "a", "test")
    assert train.num_examples == 0 and test.num_examples == 6
    low, high = spec.effort
    assert np.all((test.difficulty >= low) & (test.difficulty <= high))
    rows = [(sd.decode(x).reshape(-1).tolist(), None, 0.0) for x in test.example_arrays()[0]]
    assert puzzles_sha256(rows) == spec.puzzles_sha256  # the test split holds exactly the pinned puzzles


def test_a_changed_generator_or_hash_is_refused(tmp_path):
    with pytest.raises(DistlabError, match="never edit the hash"):
        build_holdout(load_spec(_spec(tmp_path, seed=4243)), tmp_path / "x", verbose=False)
    assert not (tmp_path / "x").exists()  # refused before anything is written


def test_a_holdout_sharing_a_puzzle_with_the_training_data_is_refused(tmp_path):
    spec = load_spec(TINY)
    build_holdout(spec, tmp_path / "h", verbose=False)
    x = load_split(tmp_path / "h", "test").example_arrays()[0]
    puzzles = tmp_path / "train.txt"  # a training set holding two of the holdout's puzzles among others
    extra = sd.build_sudoku(tmp_path / "other", train_size=4, test_size=1, seed=9, workers=1, verbose=False)
    assert extra == {"train": 4, "test": 1}
    others = load_split(tmp_path / "other", "train").example_arrays()[0]
    lines = ["".join(str(v) for v in sd.decode(r).reshape(-1)) for r in [x[1], x[4], *others]]
    puzzles.write_text("\n".join(lines) + "\n")
    sd.build_sudoku(tmp_path / "leaky", source=str(puzzles), train_size=None, test_size=1, num_aug=3, seed=0,
                    verbose=False)
    # 6 puzzles: 1 to test, 5 to train with 3 augmentations each (20 examples); both splits are compared
    with pytest.raises(DistlabError, match=r"shares 2 of its 6 puzzles with .*leaky \(21 examples compared\)"):
        build_holdout(spec, tmp_path / "h2", disjoint_from=[str(tmp_path / "leaky")], verbose=False)
    record = build_holdout(spec, tmp_path / "h3", disjoint_from=[str(tmp_path / "other")], verbose=False)
    assert record["disjoint_from"] == [{"dataset": str(tmp_path / "other"), "examples_compared": 5, "shared": 0}]


def test_a_file_holdout_reads_another_copy_through_source_and_refuses_a_changed_file(tmp_path):
    lines = [
        "4.....8.5.3..........7......2.....6.....8.4......1.......6.3.7.5..2.....1.4......",
        "52...6.........7.13...........4..8..6......5...........418.........3..2...87.....",
    ]
    (tmp_path / "p.txt").write_text("\n".join(lines) + "\n")
    rows = sd.read_txt(tmp_path / "p.txt")
    spec = {"name": "two", "fixed_on": "2026-11-28", "source": "missing/p.txt", "puzzles": 2,
            "puzzles_sha256": puzzles_sha256(rows)}
    (tmp_path / "two.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(DistlabError, match="puzzle file missing/p.txt not found .*pass --source PATH"):
        main(["sudoku", "--holdout", str(tmp_path / "two.yaml"), "--output-dir", str(tmp_path / "o")])
    main(["sudoku", "--holdout", str(tmp_path / "two.yaml"), "--output-dir", str(tmp_path / "o"),
          "--source", str(tmp_path / "p.txt")])
    assert load_split(tmp_path / "o", "test").num_examples == 2
    (tmp_path / "p.txt").write_text(lines[1] + "\n" + lines[0] + "\n")  # the same puzzles, reordered
    with pytest.raises(DistlabError, match="hash to"):
        main(["sudoku", "--holdout", str(tmp_path / "two.yaml"), "--output-dir", str(tmp_path / "o2"),
              "--source", str(tmp_path / "p.txt")])


@pytest.mark.skipif(not TOP95.exists(), reason="the shared top95 file is absent")
def test_top95_builds_as_its_spec_fixes(tmp_path):
    main(["sudoku", "--holdout", "top95", "--output-dir", str(tmp_path / "t"), "--source", str(TOP95)])
    test = load_split(tmp_path / "t", "test")
    assert test.num_examples == 95 and test.difficulty.min() >= HARD_EFFORT


@pytest.mark.parametrize(("args", "message"), [
    (["--holdout", "nope"], "no such spec; use one of sudoku-gen-holdout, top95"),
    (["--holdout", "top95", "--num-aug", "3"], "takes its puzzles from its spec; drop --num-aug"),
    (["--holdout", "top95", "--test-size", "10", "--seed", "2"], "drop --test-size, --seed"),
    (["--disjoint-from", "x"], "--disjoint-from checks a holdout; add --holdout SPEC"),
    (["--holdout", str(TINY), "--source", "x.txt"], "is generated .*drop --source x.txt"),
    (["--holdout", str(TINY), "--disjoint-from", "/nonexistent"], "no HRM dataset there"),
])
def test_bad_holdout_commands_are_refused_in_one_line(tmp_path, args, message):
    with pytest.raises(DistlabError, match=message) as err:
        main(["sudoku", "--output-dir", str(tmp_path / "o"), *args])
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("change", "message"), [
    ({"seed": None}, "missing seed"),
    ({"colour": "red"}, "unknown colour"),
    ({"effort": [30, 20]}, "effort must be \\[low, high\\]"),
    ({"effort": 20}, "effort must be"),
    ({"puzzles": "many"}, "puzzles must be a whole number"),
    ({"puzzles_sha256": "abc"}, "64 lower-case hex digits"),
    ({"source": "x.txt"}, r"unknown effort, seed, stream \(effort, seed, stream apply to source: generate only\)"),
])
def test_bad_specs_are_refused_in_one_line(tmp_path, change, message):
    data = {**yaml.safe_load(TINY.read_text()), **change}
    data = {k: v for k, v in data.items() if v is not None}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(DistlabError, match=message):
        load_spec(tmp_path / "s.yaml")
