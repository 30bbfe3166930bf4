"""Statistics across seeds: confidence intervals, tests against the baseline, efficiency and cost.

A handful of seeds per experiment is the norm, so intervals use Student's t (not a normal approximation)
and Welch's test (no equal-variance assumption between two architectures). When both experiments ran
the same seeds, a paired test removes seed-to-seed variation the two share (same data order, same init
RNG stream), and an exact sign-flip permutation test avoids the normality assumption altogether.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from distlab.errors import DistlabError

DEFAULT_MILESTONES = (0.1, 0.25, 0.5, 0.75, 0.9)
TESTS = ("welch", "paired", "exact")


@dataclass(frozen=True)
class Summary:
    """Mean of one metric over seeds with a two-sided confidence interval (nan where undefined)."""

    n: int
    mean: float
    std: float
    half_width: float
    low: float
    high: float


@dataclass(frozen=True)
class TestResult:
    """Outcome of comparing an experiment with the baseline; ``method`` says which test actually ran."""

    method: str
    statistic: float
    p_value: float
    n_a: int
    n_b: int

    def significant(self, alpha: float = 0.05) -> bool:
        return bool(np.isfinite(self.p_value) and self.p_value < alpha)


def summarize(values: Iterable[float], confidence: float = 0.95) -> Summary:
    """Mean ± t-interval; one seed gives a mean but no interval (nan), no seeds give all-nan."""
    x = _finite(values)
    n = x.size
    if n == 0:
        return Summary(0, math.nan, math.nan, math.nan, math.nan, math.nan)
    mean = float(x.mean())
    if n == 1:
        return Summary(1, mean, math.nan, math.nan, math.nan, math.nan)
    std = float(x.std(ddof=1))
    half = float(sps.t.ppf(0.5 + confidence / 2, n - 1) * std / math.sqrt(n))
    return Summary(n, mean, std, half, mean - half, mean + half)


def welch_test(a: Iterable[float], b: Iterable[float]) -> TestResult:
    """Welch's unequal-variance t-test of ``a`` against ``b``; nan when either side has fewer than 2 values."""
    xa, xb = _finite(a), _finite(b)
    if xa.size < 2 or xb.size < 2:
        return TestResult("welch", math.nan, math.nan, xa.size, xb.size)
    if _both_constant_and_equal(xa, xb):
        return TestResult("welch", 0.0, 1.0, xa.size, xb.size)
    res = sps.ttest_ind(xa, xb, equal_var=False)
    return TestResult("welch", float(res.statistic), float(res.pvalue), xa.size, xb.size)


def paired_test(a: Mapping[int, float], b: Mapping[int, float]) -> TestResult:
    """Paired t-test over the seeds both experiments have."""
    xa, xb = _paired(a, b)
    if xa.size < 2:
        return TestResult("paired", math.nan, math.nan, xa.size, xb.size)
    diff = xa - xb
    if np.all(diff == diff[0]):
        p = 1.0 if diff[0] == 0 else 0.0
        return TestResult("paired", 0.0 if diff[0] == 0 else math.copysign(math.inf, diff[0]), p, xa.size, xb.size)
    res = sps.ttest_rel(xa, xb)
    return TestResult("paired", float(res.statistic), float(res.pvalue), xa.size, xb.size)


def exact_paired_test(a: Mapping[int, float], b: Mapping[int, float]) -> TestResult:
    """Exact permutation test on the mean paired difference (all 2^n sign flips), no normality assumed.

    With n seeds the smallest attainable two-sided p-value is 2 / 2^n, so n=5 cannot go below 0.0625;
    that is a property of the data, not a bug.
    """
    xa, xb = _paired(a, b)
    if xa.size < 2:
        return TestResult("exact", math.nan, math.nan, xa.size, xb.size)
    res = sps.permutation_test((xa, xb), _mean_difference, permutation_type="samples",
                               n_resamples=math.inf, alternative="two-sided")
    return TestResult("exact", float(res.statistic), float(min(1.0, res.pvalue)), xa.size, xb.size)


def compare(a: Mapping[int, float], b: Mapping[int, float], method: str = "welch") -> TestResult:
    """Test experiment ``a`` against baseline ``b`` (seed -> value); paired tests fall back to Welch
    when the two do not share the same seeds, since pairing unrelated runs would be meaningless."""
    if method not in TESTS:
        raise DistlabError(f"unknown test {method!r}; use one of {', '.join(TESTS)}")
    if method != "welch" and set(a) == set(b) and len(a) >= 2:
        return paired_test(a, b) if method == "paired" else exact_paired_test(a, b)
    return welch_test(list(a.values()), list(b.values()))


def first_reach(steps: Sequence[float], values: Sequence[float], threshold: float) -> int | None:
    """Index of the first evaluation whose value reaches ``threshold`` (None if it never does)."""
    order = np.argsort(np.asarray(steps, dtype=float), kind="stable")
    vals = np.asarray(values, dtype=float)[order]
    hit = np.flatnonzero(vals >= threshold)
    return int(order[hit[0]]) if hit.size else None


def milestones(curve: Sequence[Mapping[str, float]], thresholds: Iterable[float] = DEFAULT_MILESTONES, *,
               metric: str) -> dict[float, dict[str, float] | None]:
    """Training efficiency: the step and GPU-seconds of the first eval where ``metric`` (a fraction that
    grows with training, the recipe's primary metric) reaches each milestone."""
    rows = [r for r in curve if metric in r and r[metric] is not None]
    out: dict[float, dict[str, float] | None] = {}
    for thr in thresholds:
        idx = first_reach([r["step"] for r in rows], [r[metric] for r in rows], thr)
        if idx is None:
            out[thr] = None
        else:
            row = rows[idx]
            out[thr] = {"step": float(row["step"]), "gpu_seconds": float(row.get("gpu_seconds", row.get("device_seconds", math.nan)))}
    return out


def flops_per_point(flops: float | None, accuracy: float | None) -> float:
    """Computational cost: training FLOPs per percentage point of accuracy (inf at zero accuracy)."""
    if flops is None or accuracy is None or not np.isfinite(flops) or not np.isfinite(accuracy):
        return math.nan
    points = 100.0 * accuracy
    return math.inf if points <= 0 else float(flops) / points


def curve_band(curves: Sequence[Sequence[tuple[float, float]]], confidence: float = 0.95
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean and CI band of several (step, value) curves at every step any of them evaluated.

    Seeds evaluated at the same steps give a plain per-step mean; a step some seed lacks averages only
    the seeds that have it (and its band is wider or undefined), rather than inventing values.
    """
    by_step: dict[float, list[float]] = {}
    for curve in curves:
        for step, value in curve:
            by_step.setdefault(float(step), []).append(float(value))
    steps = np.array(sorted(by_step))
    summaries = [summarize(by_step[s], confidence) for s in steps]
    mean = np.array([s.mean for s in summaries])
    low = np.array([s.low for s in summaries])
    high = np.array([s.high for s in summaries])
    return steps, mean, low, high


def _mean_difference(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x - y, axis=axis)


def _paired(a: Mapping[int, float], b: Mapping[int, float]) -> tuple[np.ndarray, np.ndarray]:
    seeds = sorted(s for s in set(a) & set(b) if np.isfinite(a[s]) and np.isfinite(b[s]))
    return np.array([a[s] for s in seeds], dtype=float), np.array([b[s] for s in seeds], dtype=float)


def _both_constant_and_equal(xa: np.ndarray, xb: np.ndarray) -> bool:
    """scipy returns nan for two zero-variance samples; identical constants mean 'no difference' (p=1)."""
    return bool(np.ptp(xa) == 0 and np.ptp(xb) == 0 and xa[0] == xb[0])


def _finite(values: Iterable[float]) -> np.ndarray:
    x = np.asarray([v for v in values if v is not None], dtype=float)
    return x[np.isfinite(x)]


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment over one family of tests (every experiment against the baseline, one
    metric): a suite compares many configurations at once, so an uncorrected p < 0.05 somewhere is expected
    by chance alone. Holm controls the family-wise error without Bonferroni's loss of power. nan stays nan."""
    from statsmodels.stats.multitest import multipletests

    idx = [i for i, p in enumerate(p_values) if math.isfinite(p)]
    out = [math.nan] * len(p_values)
    if idx:
        adjusted = multipletests([p_values[i] for i in idx], method="holm")[1]
        for i, p in zip(idx, adjusted):
            out[i] = float(p)
    return out
