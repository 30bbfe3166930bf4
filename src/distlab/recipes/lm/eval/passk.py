"""pass@k with confidence intervals, and paired before/after comparisons, as the reviewer asks for them.

A gain is claimed only from a paired test on the same problems (McNemar's exact test for pass/fail outcomes, an
exact sign-flip test of the per-problem differences for graded scores): problems differ far more in difficulty than two
checkpoints do, so unpaired intervals overlap even when one system is better on nearly every problem. Intervals come from ``scipy.stats.bootstrap`` over problems (the unit that was sampled), with a fixed seed
so a report is reproducible. Results are dataclasses of plain floats/ints with ``to_dict`` for JSON.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.stats import binomtest

from distlab.errors import DistlabError

BOOTSTRAP_METHODS = ("BCa", "percentile", "basic")


def pass_at_k(n: Any, c: Any, k: int) -> Any:
    """Unbiased pass@k of the Codex paper, 1 - C(n-c, k) / C(n, k), per problem.

    ``n`` (samples) and ``c`` (correct samples) broadcast against each other; a scalar pair gives a float, arrays give
    an array. The product form avoids the huge binomials; when fewer than k samples are wrong, every k-subset holds
    a correct one and the value is exactly 1.
    """
    n_arr, c_arr = np.broadcast_arrays(np.asarray(n), np.asarray(c))
    if n_arr.size and not (np.all(np.mod(n_arr, 1) == 0) and np.all(np.mod(c_arr, 1) == 0)):
        raise DistlabError("pass@k needs whole numbers of samples (n) and of correct samples (c)")
    k = int(k)
    if k < 1:
        raise DistlabError(f"pass@k needs k >= 1, got k={k}")
    if np.any(c_arr < 0) or np.any(c_arr > n_arr):
        raise DistlabError("pass@k needs 0 <= c <= n for every problem")
    if np.any(n_arr < k):
        raise DistlabError(f"pass@{k} needs at least {k} samples per problem; some have n={int(n_arr.min())}")
    out = np.empty(n_arr.shape, dtype=np.float64)
    for idx in np.ndindex(n_arr.shape):
        nn, cc = int(n_arr[idx]), int(c_arr[idx])
        if nn - cc < k:
            out[idx] = 1.0
        else:
            out[idx] = 1.0 - float(np.prod(1.0 - k / np.arange(nn - cc + 1, nn + 1, dtype=np.float64)))
    return float(out) if out.ndim == 0 else out


def pass_at_k_per_problem(correct: Sequence[Sequence[bool]], k: int) -> np.ndarray:
    """pass@k of each problem from its list of per-sample outcomes (lists may differ in length)."""
    n = np.array([len(r) for r in correct], dtype=np.int64)
    c = np.array([int(sum(bool(x) for x in r)) for r in correct], dtype=np.int64)
    return np.asarray(pass_at_k(n, c, k), dtype=np.float64).reshape(-1)


@dataclass(frozen=True)
class Interval:
    """A mean over problems and its bootstrap confidence interval."""

    mean: float
    low: float
    high: float
    confidence: float
    n_problems: int
    method: str
    n_resamples: int
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check_bootstrap_args(confidence: float, method: str, n_resamples: int) -> None:
    if not 0.0 < confidence < 1.0:
        raise DistlabError(f"confidence must be in (0, 1), got {confidence}")
    if method not in BOOTSTRAP_METHODS:
        raise DistlabError(f"bootstrap method {method!r} is not one of {', '.join(BOOTSTRAP_METHODS)}")
    if n_resamples < 100:
        raise DistlabError(f"n_resamples={n_resamples} is too few for a confidence interval; use >= 1000")


def bootstrap_ci(values: Sequence[float] | np.ndarray, *, confidence: float = 0.95, n_resamples: int = 10_000,
                 method: str = "BCa", seed: int = 0, outcomes: bool = False) -> Interval:
    """Mean of per-problem ``values`` with a bootstrap interval over problems.

    BCa by default, because pass rates near 0 or 1 make the sampling distribution skewed; where BCa is undefined
    (e.g. a single non-zero value among zeros can make its acceleration degenerate) the percentile interval is used
    and ``method`` says so. ``outcomes=True`` says the values are pass/fail (1/0) results: if they all agree (every
    problem solved, or none) they get the exact binomial (Clopper-Pearson) interval instead, since every resample of
    such data is the same and a bootstrap would claim "100% [100, 100]" after 64 problems. Other constant data (a
    paired difference of zeros, or one problem) gives a zero-width interval at the mean.
    """
    _check_bootstrap_args(confidence, method, n_resamples)
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size == 0:
        raise DistlabError("no problems to average: the list of per-problem values is empty")
    if not np.all(np.isfinite(x)):
        raise DistlabError("per-problem values must be finite numbers")
    mean = float(x.mean())
    if outcomes and np.ptp(x) == 0.0 and mean in (0.0, 1.0):
        exact = binomtest(int(round(x.sum())), int(x.size)).proportion_ci(confidence, method="exact")
        return Interval(mean, float(exact.low), float(exact.high), confidence, int(x.size), "exact binomial",
                        n_resamples, seed)
    if x.size == 1 or np.ptp(x) == 0.0:
        return Interval(mean, mean, mean, confidence, int(x.size), "degenerate", n_resamples, seed)
    used = method
    low, high = _scipy_interval(x, confidence, n_resamples, method, seed)
    if not (np.isfinite(low) and np.isfinite(high)) and method != "percentile":
        used = "percentile"
        low, high = _scipy_interval(x, confidence, n_resamples, used, seed)
    return Interval(mean, float(low), float(high), confidence, int(x.size), used, n_resamples, seed)


def _scipy_interval(x: np.ndarray, confidence: float, n_resamples: int, method: str,
                    seed: int) -> tuple[float, float]:
    from scipy import stats  # imported here: scipy.stats costs ~1 s, and trainers import this module at start-up

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        warnings.simplefilter("ignore", category=getattr(stats, "DegenerateDataWarning", RuntimeWarning))
        res = stats.bootstrap((x,), np.mean, n_resamples=n_resamples, vectorized=True, axis=0,
                              confidence_level=confidence, method=method, batch=1000,
                              rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def pass_at_k_summary(n: Any, c: Any, ks: Sequence[int] = (1,), **bootstrap: Any) -> dict[str, Interval]:
    """``{"pass@k": Interval}`` for each k that every problem has enough samples for."""
    n_arr = np.asarray(n).reshape(-1)
    out: dict[str, Interval] = {}
    for k in ks:
        if n_arr.size and int(n_arr.min()) >= k:
            out[f"pass@{k}"] = bootstrap_ci(pass_at_k(n_arr, np.asarray(c).reshape(-1), k), **bootstrap)
    return out


@dataclass(frozen=True)
class PairedComparison:
    """Candidate minus baseline on the same problems.

    For pass/fail data (pass@1 with one greedy sample) the test is McNemar's exact test: under "no difference"
    each discordant problem is equally likely to favour either system, so their split is Binomial(n_discordant,
    1/2). ``significant`` means its p-value is below 1 - confidence, and the interval is the exact (Clopper-Pearson)
    interval of that split mapped onto the difference of means, given the discordant count: 3 problems fixed and
    none broken out of 500 is p = 0.25, not a gain, whatever a bootstrap of 497 zeros and 3 ones says.

    For graded scores (pass@k from several samples, a change of SCoRe's r2 - r1) the same holds: a bootstrap
    of a handful of nonzero differences is anti-conservative (six +1 and one -1 out of 500 gave an interval
    [+0.2, +2.2] pp). ``significant`` therefore comes from :func:`sign_flip_p`, the exact permutation test of
    the nonzero differences (p = 0.125 there); the interval stays a bootstrap over problems, an effect size
    that is not the test.
    """

    n_problems: int
    mean_baseline: float
    mean_candidate: float
    diff: float
    low: float
    high: float
    confidence: float
    method: str
    significant: bool
    candidate_only: int | None = None  # problems the candidate passes and the baseline fails
    baseline_only: int | None = None
    mcnemar_p: float | None = None
    sign_flip_p: float | None = None  # graded scores: the exact sign-flip p that decides ``significant``
    nonzero: int | None = None  # graded scores: problems whose score changed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def p_value(self) -> float:
        """The p-value behind ``significant``, whichever test gave it."""
        return float(self.mcnemar_p if self.mcnemar_p is not None else self.sign_flip_p)


def paired_comparison(baseline: Sequence[float] | np.ndarray, candidate: Sequence[float] | np.ndarray, *,
                      confidence: float = 0.95, n_resamples: int = 10_000, method: str = "BCa",
                      seed: int = 0) -> PairedComparison:
    """Compare two systems' per-problem scores (pass@k values, or pass/fail booleans) problem by problem."""
    a = np.asarray(baseline, dtype=np.float64).reshape(-1)
    b = np.asarray(candidate, dtype=np.float64).reshape(-1)
    if a.shape != b.shape:
        raise DistlabError(f"paired comparison needs the same problems for both systems; got {a.size} and {b.size} "
                           "per-problem values")
    binary = bool(a.size and np.all(np.isin(a, (0.0, 1.0))) and np.all(np.isin(b, (0.0, 1.0))))
    common = dict(n_problems=int(a.size), mean_baseline=float(a.mean()), mean_candidate=float(b.mean()),
                  confidence=confidence)
    if binary:
        return PairedComparison(**common, **_mcnemar(a, b, confidence))
    ci = bootstrap_ci(b - a, confidence=confidence, n_resamples=n_resamples, method=method, seed=seed)
    p = sign_flip_p(b - a, seed=seed)
    exact = int(np.count_nonzero(b - a)) <= EXACT_SIGN_FLIP_MAX
    return PairedComparison(**common, diff=ci.mean, low=ci.low, high=ci.high,
                            method=f"{'exact' if exact else 'Monte Carlo'} sign-flip p, {ci.method} bootstrap interval",
                            significant=p < 1 - confidence, sign_flip_p=p, nonzero=int(np.count_nonzero(b - a)))


# Up to 2**16 sign patterns are enumerated (under a second); beyond, MONTE_CARLO_SIGN_FLIPS random ones (a p near
# 0.05 then has a standard error of about 0.0015). Enumerating 2**20 took 14 s and 1.3 GB on one core.
EXACT_SIGN_FLIP_MAX = 16
MONTE_CARLO_SIGN_FLIPS = 20_000
SIGN_FLIP_BATCH = 4096  # patterns evaluated at once: bounds memory to a few MB per hundred problems


def sign_flip_p(diffs: Sequence[float] | np.ndarray, seed: int = 0) -> float:
    """Two-sided p of the paired sign-flip (permutation) test that the mean of ``diffs`` is 0.

    Under "no difference" each problem's difference is as likely to have either sign, so the null distribution
    of the mean comes from flipping signs independently; problems with difference 0 flip to themselves and drop
    out. Exact (every sign pattern) for up to ``EXACT_SIGN_FLIP_MAX`` nonzero differences, where a bootstrap
    misleads most; beyond that, ``MONTE_CARLO_SIGN_FLIPS`` random patterns from ``seed``. Six +1 and one -1 give
    p = 16/128 = 0.125; all differences 0 give 1.
    """
    from scipy import stats

    d = np.asarray(diffs, dtype=np.float64).reshape(-1)
    d = d[d != 0]
    if d.size == 0:
        return 1.0
    exact = d.size <= EXACT_SIGN_FLIP_MAX
    res = stats.permutation_test((d,), _mean_along, permutation_type="samples", vectorized=True,
                                 n_resamples=2 ** d.size if exact else MONTE_CARLO_SIGN_FLIPS,
                                 batch=SIGN_FLIP_BATCH, alternative="two-sided", rng=np.random.default_rng(seed))
    return float(min(1.0, res.pvalue))


def _mean_along(x: np.ndarray, axis: int) -> np.ndarray:
    return np.mean(x, axis=axis)


def _mcnemar(a: np.ndarray, b: np.ndarray, confidence: float) -> dict[str, Any]:
    """McNemar's exact test on paired 0/1 outcomes and the matching conditional interval of the difference."""
    from scipy import stats

    cand_only = int(np.sum((b == 1.0) & (a == 0.0)))
    base_only = int(np.sum((a == 1.0) & (b == 0.0)))
    discordant = cand_only + base_only
    diff = (cand_only - base_only) / a.size
    if discordant == 0:
        p, low, high = 1.0, 0.0, 0.0
    else:
        test = stats.binomtest(cand_only, discordant, 0.5)
        share = test.proportion_ci(confidence_level=confidence, method="exact")
        p = float(test.pvalue)
        low, high = (discordant * (2 * q - 1) / a.size for q in (share.low, share.high))
    return dict(diff=diff, low=float(low), high=float(high), method="exact McNemar", significant=p < 1 - confidence,
                candidate_only=cand_only, baseline_only=base_only, mcnemar_p=p)
