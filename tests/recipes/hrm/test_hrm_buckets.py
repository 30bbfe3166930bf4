"""Accuracy by difficulty: quantile buckets that never split equal values, table and plot."""

import numpy as np
import pytest

from distlab.errors import DistlabError
from distlab.recipes.hrm.buckets import accuracy_by_difficulty, plot_buckets, render_table


def test_continuous_values_make_equal_quantile_buckets():
    d = np.random.default_rng(0).permutation(np.arange(1, 101))
    rows = accuracy_by_difficulty(d, d > 50, n_buckets=5)
    assert [r["bucket"] for r in rows] == ["1-20", "21-40", "41-60", "61-80", "81-100"]
    assert [r["count"] for r in rows] == [20] * 5
    assert [r["exact_accuracy"] for r in rows] == [0.0, 0.0, 0.5, 1.0, 1.0]
    assert (rows[2]["lo"], rows[2]["hi"]) == (41.0, 60.0)


def test_few_distinct_integers_get_one_bucket_each():
    d = np.array([0] * 50 + [1] * 20 + [2] * 20 + [3] * 10)
    correct = np.array([True] * 25 + [False] * 25 + [True] * 5 + [False] * 15 + [False] * 30)
    rows = accuracy_by_difficulty(d, correct, n_buckets=5)
    assert [r["bucket"] for r in rows] == ["0-0", "1-1", "2-2", "3-3"]
    assert [r["count"] for r in rows] == [50, 20, 20, 10]
    assert [r["exact_accuracy"] for r in rows] == [0.5, 0.25, 0.0, 0.0]
    three = accuracy_by_difficulty(d, correct, n_buckets=3)  # the heavy 0 keeps its own bucket
    assert [(r["lo"], r["hi"], r["count"]) for r in three] == [(0, 0, 50), (1, 1, 20), (2, 3, 30)]


def test_ties_never_straddle_buckets():
    rng = np.random.default_rng(1)
    d = rng.geometric(0.3, 2000).astype(float)
    correct = rng.random(2000) < 1 / d
    rows = accuracy_by_difficulty(d, correct, n_buckets=5)
    assert sum(r["count"] for r in rows) == 2000 and 2 <= len(rows) <= 5
    for a, b in zip(rows, rows[1:]):
        assert a["hi"] < b["lo"]  # disjoint, ordered
    for r in rows:
        sel = (d >= r["lo"]) & (d <= r["hi"])
        assert sel.sum() == r["count"] and r["exact_accuracy"] == pytest.approx(correct[sel].mean())
    assert rows[0]["exact_accuracy"] > rows[-1]["exact_accuracy"]


def test_nan_difficulty_is_one_unknown_row():
    d = np.array([1.0, 2.0, np.nan, np.nan, np.nan])
    rows = accuracy_by_difficulty(d, np.array([1, 0, 1, 1, 0]), n_buckets=2)
    assert [r["bucket"] for r in rows] == ["1-1", "2-2", "unknown"]
    assert rows[-1]["count"] == 3 and rows[-1]["exact_accuracy"] == pytest.approx(2 / 3)
    assert rows[-1]["lo"] is None
    only_nan = accuracy_by_difficulty(np.full(4, np.nan), np.array([1, 1, 1, 0]))
    assert len(only_nan) == 1 and only_nan[0]["exact_accuracy"] == 0.75


def test_bad_input_raises():
    with pytest.raises(DistlabError, match="one value per example"):
        accuracy_by_difficulty(np.arange(3), np.ones(4))
    with pytest.raises(DistlabError, match="n_buckets"):
        accuracy_by_difficulty(np.arange(3), np.ones(3), n_buckets=0)


def test_table_and_plot(tmp_path):
    rows = accuracy_by_difficulty(np.array([0, 0, 1, 5, np.nan]), np.array([1, 0, 1, 0, 1]), n_buckets=3)
    table = render_table(rows).splitlines()
    assert table[0].startswith("| difficulty |") and len(table) == 2 + len(rows)
    assert table[2] == "| 0-0 | 2 | 0.500 |" and table[-1] == "| unknown | 1 | 1.000 |"
    pytest.importorskip("matplotlib")
    out = plot_buckets(rows, tmp_path / "plots" / "acc.png", "sudoku")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
    assert sorted(p.name for p in out.parent.iterdir()) == ["acc.png"]  # no temp file left behind
    with pytest.raises(DistlabError, match="no buckets"):
        plot_buckets([], tmp_path / "x.png", "empty")


def test_blank_accuracy_per_bucket_is_cell_weighted():
    d = np.array([1.0, 1.0, 5.0, np.nan])
    rows = accuracy_by_difficulty(d, np.array([True, False, False, False]), n_buckets=2,
                                  blank=(np.array([10, 0, 3, 1]), np.array([10, 30, 6, 2])))
    assert [r["bucket"] for r in rows] == ["1-1", "5-5", "unknown"]
    assert [r["blank_accuracy"] for r in rows] == [0.25, 0.5, 0.5]
    assert [r["blank_cells"] for r in rows] == [40, 6, 2]
