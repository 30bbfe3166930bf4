"""Unbiased pass@k, bootstrap intervals over problems and paired comparisons."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from distlab.errors import DistlabError
from distlab.recipes.lm.eval.passk import (bootstrap_ci, paired_comparison, pass_at_k, pass_at_k_per_problem,
                                      pass_at_k_summary)


def _brute(n: int, c: int, k: int) -> float:
    """Probability that a random k-subset of n samples holds at least one of the c correct ones."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def test_matches_combinatorial_definition():
    cases = [(n, c, k) for n in range(1, 25) for c in range(0, n + 1) for k in range(1, n + 1)]
    cases += [(200, c, k) for c in (0, 1, 3, 50, 199, 200) for k in (1, 10, 100)]
    got = pass_at_k(np.array([n for n, _, _ in cases[:40]]), np.array([c for _, c, _ in cases[:40]]), 1)
    assert np.allclose(got, [c / n for n, c, _ in cases[:40]])
    for n, c, k in cases:
        assert pass_at_k(n, c, k) == pytest.approx(_brute(n, c, k), abs=1e-12), (n, c, k)
    n_vec = np.array([n for n, _, _ in cases if n >= 7])
    c_vec = np.array([c for n, c, _ in cases if n >= 7])
    assert np.allclose(pass_at_k(n_vec, c_vec, 7), [_brute(n, c, 7) for n, c in zip(n_vec, c_vec)], atol=1e-12)


def test_edge_cases_and_vectorisation():
    assert pass_at_k(10, 0, 1) == 0.0 and pass_at_k(10, 0, 10) == 0.0
    assert pass_at_k(10, 10, 1) == 1.0 and pass_at_k(10, 8, 3) == 1.0  # n - c < k
    assert pass_at_k(5, 1, 1) == pytest.approx(0.2)
    out = pass_at_k([20, 20, 20], [0, 5, 20], 5)
    assert isinstance(out, np.ndarray) and out.shape == (3,) and out[0] == 0.0 and out[2] == 1.0
    assert isinstance(pass_at_k(4, 2, 2), float)
    per = pass_at_k_per_problem([[True, False, False, False], [False] * 4, [True] * 2 + [False] * 3], 1)
    assert np.allclose(per, [0.25, 0.0, 0.4])
    for bad in [(3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4), (3.5, 1, 1)]:
        with pytest.raises(DistlabError):
            pass_at_k(*bad)


def test_bootstrap_interval_contains_mean_shrinks_with_n_and_is_reproducible():
    rng = np.random.default_rng(0)
    widths = []
    for n in (50, 200, 800):
        x = (rng.random(n) < 0.3).astype(float)
        ci = bootstrap_ci(x, n_resamples=2000, seed=1)
        assert ci.low <= ci.mean <= ci.high and ci.mean == pytest.approx(x.mean())
        assert ci.n_problems == n and ci.method == "BCa"
        widths.append(ci.high - ci.low)
        assert bootstrap_ci(x, n_resamples=2000, seed=1) == ci
        assert bootstrap_ci(x, n_resamples=2000, seed=1, method="percentile").method == "percentile"
    assert widths[0] > widths[1] > widths[2]
    assert widths[2] == pytest.approx(2 * 1.96 * math.sqrt(0.3 * 0.7 / 800), rel=0.25)
    flat = bootstrap_ci([0.5] * 10)
    assert (flat.low, flat.mean, flat.high, flat.method) == (0.5, 0.5, 0.5, "degenerate")
    # all solved, or none: the exact binomial interval, 1 - (alpha / 2) ** (1 / n) wide, never zero-width
    solved, none = bootstrap_ci([1.0] * 10, outcomes=True), bootstrap_ci([0.0] * 64, outcomes=True)
    assert (solved.mean, solved.high, solved.method) == (1.0, 1.0, "exact binomial")
    assert solved.low == pytest.approx(0.025 ** (1 / 10))
    assert (none.low, none.mean, none.method) == (0.0, 0.0, "exact binomial")
    assert none.high == pytest.approx(1 - 0.025 ** (1 / 64))
    assert bootstrap_ci([0.0] * 64).method == "degenerate"  # not outcomes: a paired difference of zeros
    json.dumps(flat.to_dict())
    with pytest.raises(DistlabError):
        bootstrap_ci([])


def test_summary_per_k():
    n = np.full(30, 10)
    c = np.arange(30) % 11
    summary = pass_at_k_summary(n, c, ks=(1, 5, 20), n_resamples=1000)
    assert set(summary) == {"pass@1", "pass@5"} and summary["pass@1"].mean < summary["pass@5"].mean


def test_paired_comparison_detects_real_difference_not_null():
    rng = np.random.default_rng(2)
    base = rng.random(300) < 0.3
    better = base | (rng.random(300) < 0.15)  # fixes ~10% of problems, breaks none
    real = paired_comparison(base, better, n_resamples=2000)
    assert real.significant and real.low > 0 and real.diff == pytest.approx(better.mean() - base.mean())
    assert real.baseline_only == 0 and real.candidate_only > 20 and real.mcnemar_p < 1e-3
    json.dumps(real.to_dict())

    same = base.copy()  # same quality, different problems: 15 fixed, 15 broken
    idx = rng.permutation(np.flatnonzero(base))[:15]
    jdx = rng.permutation(np.flatnonzero(~base))[:15]
    same[idx] = False
    same[jdx] = True
    null = paired_comparison(base, same, n_resamples=2000)
    assert null.diff == 0.0 and not null.significant and null.low < 0 < null.high
    assert null.candidate_only == null.baseline_only == 15 and null.mcnemar_p == pytest.approx(1.0)

    identical = paired_comparison(base, base, n_resamples=2000)
    assert not identical.significant and identical.mcnemar_p == 1.0


def test_paired_comparison_on_pass_at_k_values():
    rng = np.random.default_rng(3)
    a = rng.random(100)
    b = np.clip(a + 0.05 + 0.02 * rng.standard_normal(100), 0, 1)
    res = paired_comparison(a, b, n_resamples=2000)
    assert res.significant and res.mcnemar_p is None and res.candidate_only is None
    with pytest.raises(DistlabError, match="same problems"):
        paired_comparison(a, b[:-1])


def test_few_discordant_pairs_are_not_a_significant_gain():
    """3 problems fixed and none broken of 500: McNemar's exact p is 0.25 (a bootstrap interval excluded 0)."""
    base = np.zeros(500)
    cand = base.copy()
    cand[:3] = 1.0
    res = paired_comparison(base, cand, n_resamples=2000)
    assert (res.candidate_only, res.baseline_only) == (3, 0)
    assert res.mcnemar_p == pytest.approx(0.25)
    assert not res.significant and res.low < 0 < res.high and res.diff == pytest.approx(0.006)
    more = cand.copy()
    more[3:9] = 1.0  # 9 fixed, 0 broken: p = 2 / 2**9
    res = paired_comparison(base, more, n_resamples=2000)
    assert res.mcnemar_p == pytest.approx(2 / 2**9) and res.significant and res.low > 0
