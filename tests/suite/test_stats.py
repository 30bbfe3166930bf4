"""Statistics against hand-computed values (t-table constants, Welch-Satterthwaite by formula)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from distlab.errors import DistlabError
from distlab.suite.stats import (compare, curve_band, exact_paired_test, flops_per_point, milestones, paired_test,
                                 summarize, welch_test)

T_975_DF2 = 4.303  # two-sided 95% Student t critical value, 2 degrees of freedom (printed t tables)
T_975_DF4 = 2.776


def test_summary_ci_matches_t_table():
    s = summarize([0.2, 0.4, 0.6])
    assert s.n == 3 and s.mean == pytest.approx(0.4) and s.std == pytest.approx(0.2)
    assert s.half_width == pytest.approx(T_975_DF2 * 0.2 / math.sqrt(3), rel=1e-3)
    assert (s.low, s.high) == pytest.approx((0.4 - s.half_width, 0.4 + s.half_width))
    s5 = summarize([1, 2, 3, 4, 5])
    assert s5.half_width == pytest.approx(T_975_DF4 * math.sqrt(2.5) / math.sqrt(5), rel=1e-3)


def test_summary_degenerate_sizes_do_not_crash():
    one = summarize([0.7])
    assert one.n == 1 and one.mean == 0.7 and math.isnan(one.half_width) and math.isnan(one.low)
    none = summarize([])
    assert none.n == 0 and math.isnan(none.mean)
    assert summarize([0.5, float("nan"), None]).n == 1  # missing values are dropped, not propagated


def test_welch_matches_formula():
    a, b = [0.8, 0.85, 0.9, 0.82], [0.5, 0.6, 0.7]
    va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    t = (np.mean(a) - np.mean(b)) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    res = welch_test(a, b)
    assert res.statistic == pytest.approx(t)
    assert res.p_value == pytest.approx(2 * sps.t.sf(abs(t), df))
    assert res.significant(0.05) == (res.p_value < 0.05)
    assert math.isnan(welch_test([0.5], [0.1, 0.2]).p_value)
    assert welch_test([0.3, 0.3], [0.3, 0.3]).p_value == 1.0


def test_paired_and_exact_tests():
    a = {0: 0.6, 1: 0.7, 2: 0.9}
    b = {0: 0.5, 1: 0.65, 2: 0.7}
    d = np.array([0.1, 0.05, 0.2])
    t = d.mean() / (d.std(ddof=1) / math.sqrt(3))
    assert paired_test(a, b).p_value == pytest.approx(2 * sps.t.sf(t, 2))
    # all 2^3 sign flips: only the all-positive and all-negative ones are as extreme -> p = 2/8
    assert exact_paired_test(a, b).p_value == pytest.approx(0.25)
    assert compare(a, b, "exact").method == "exact"
    assert compare(a, {0: 0.5, 5: 0.6, 6: 0.7}, "paired").method == "welch"  # seeds differ: no pairing
    with pytest.raises(DistlabError, match="unknown test"):
        compare(a, b, "mann")


def test_milestones_first_eval_reaching_each_threshold():
    curve = [{"step": 300, "exact_accuracy": 0.6, "gpu_seconds": 30.0},
             {"step": 100, "exact_accuracy": 0.05, "gpu_seconds": 10.0},
             {"step": 200, "exact_accuracy": 0.3, "gpu_seconds": 20.0}]
    m = milestones(curve, (0.1, 0.25, 0.5, 0.9), metric="exact_accuracy")
    assert m[0.1] == {"step": 200.0, "gpu_seconds": 20.0}
    assert m[0.25]["step"] == 200 and m[0.5]["step"] == 300 and m[0.9] is None


def test_cost_and_curve_band():
    assert flops_per_point(5e15, 0.5) == pytest.approx(1e14)
    assert flops_per_point(5e15, 0.0) == math.inf
    assert math.isnan(flops_per_point(None, 0.5))
    steps, mean, low, high = curve_band([[(1, 0.1), (2, 0.3)], [(1, 0.3), (2, 0.5)], [(2, 0.7)]])
    assert list(steps) == [1, 2] and mean == pytest.approx([0.2, 0.5])
    assert high[1] - mean[1] == pytest.approx(T_975_DF2 * 0.2 / math.sqrt(3), rel=1e-3)
