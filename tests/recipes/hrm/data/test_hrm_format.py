"""Round trip of HRM's on-disk format and its error messages."""

import json

import numpy as np
import pytest

from distlab.errors import DistlabError
from distlab.recipes.hrm.data.format import PuzzleMetadata, SplitBuilder, load_identifiers, load_split, write_identifiers


def _meta(seq_len):
    return PuzzleMetadata(pad_id=0, ignore_label_id=0, blank_identifier_id=0, vocab_size=7, seq_len=seq_len,
                          num_puzzle_identifiers=4, total_groups=0, mean_puzzle_examples=0.0)


def test_round_trip_offsets_and_per_example_ids(tmp_path):
    rng = np.random.default_rng(0)
    b = SplitBuilder(seq_len=5)
    expected = []
    # group 0: puzzle id 1 with 2 examples, puzzle id 2 with 1 example; group 1: puzzle id 3 with 3 examples
    for pid, n, g_end in ((1, 2, False), (2, 1, True), (3, 3, True)):
        ex = [(rng.integers(0, 7, 5), rng.integers(0, 7, 5)) for _ in range(n)]
        b.add_puzzle(ex, pid, difficulty=float(pid * 10))
        expected += [(i, l, pid) for i, l in ex]
        if g_end:
            b.end_group()
    b.write(tmp_path, "train", _meta(5))
    write_identifiers(tmp_path, ["<blank>", "a", "b", "c"])

    s = load_split(tmp_path, "train")
    st = s.sets["all"]
    assert isinstance(st.inputs, np.memmap)
    assert st.puzzle_indices.tolist() == [0, 2, 3, 6]
    assert st.group_indices.tolist() == [0, 2, 3]
    assert st.puzzle_identifiers.tolist() == [1, 2, 3]
    assert s.num_examples == 6
    for k, (i, l, pid) in enumerate(expected):
        x, y, p = s.example(k)
        assert np.array_equal(x, i) and np.array_equal(y, l) and p == pid
    assert s.difficulty.tolist() == [10, 10, 20, 30, 30, 30]
    assert s.metadata.total_groups == 2 and s.metadata.mean_puzzle_examples == pytest.approx(2.0)
    raw = json.loads((tmp_path / "train" / "dataset.json").read_text())
    assert set(raw) == {"pad_id", "ignore_label_id", "blank_identifier_id", "vocab_size", "seq_len",
                        "num_puzzle_identifiers", "total_groups", "mean_puzzle_examples", "sets"}
    assert load_identifiers(tmp_path)[3] == "c"
    assert not list((tmp_path / "train").glob("*.tmp"))  # atomic writes leave no temp files


def test_hrm_built_data_without_difficulty_loads(tmp_path):
    b = SplitBuilder(seq_len=3)
    b.add_group([([(np.ones(3), np.ones(3))], 0)])
    b.write(tmp_path, "test", _meta(3), with_difficulty=False)
    s = load_split(tmp_path, "test")
    assert s.difficulty is None and s.num_examples == 1


def test_missing_paths_name_the_build_command(tmp_path):
    with pytest.raises(DistlabError, match="distlab data"):
        load_split(tmp_path / "nope", "train")
    (tmp_path / "train").mkdir()
    with pytest.raises(DistlabError, match=r"dataset\.json"):
        load_split(tmp_path, "train")


def test_builder_rejects_open_group():
    b = SplitBuilder(seq_len=2)
    b.add_puzzle([(np.zeros(2), np.zeros(2))])
    with pytest.raises(ValueError):
        b.arrays()
