"""Self-correction metrics (the SCoRe paper's table): accuracy per turn and what turn 2 does to turn 1's answers.

* ``acc_t1``, ``acc_t2``: fraction of episodes whose turn-1 / turn-2 program passes every hidden test;
* ``delta_t1_t2`` = acc_t2 - acc_t1;
* ``delta_i_to_c``: fraction wrong at turn 1 and right at turn 2 (problems fixed);
* ``delta_c_to_i``: fraction right at turn 1 and wrong at turn 2 (correct answers broken);
* with a guidance model, ``acc_t2_no_hint`` (turn 2 sampled again on the same y1 without the hint) and
  ``hint_gain`` = acc_t2 - acc_t2_no_hint, ``hint_tokens`` and ``hint_leak_rate``.

All are sums first (so ranks add them exactly) and means afterwards.
"""

from __future__ import annotations

import numpy as np

from distlab.recipes.lm.eval.passk import bootstrap_ci, paired_comparison

HEADLINE = ("acc_t1", "acc_t2", "delta_t1_t2", "delta_i_to_c", "delta_c_to_i")


def per_problem(r1: float, r2: float) -> dict[str, float]:
    """The per-episode values whose means are the headline metrics."""
    return {"acc_t1": r1, "acc_t2": r2, "delta_t1_t2": r2 - r1, "delta_i_to_c": (1 - r1) * r2,
            "delta_c_to_i": r1 * (1 - r2)}


def sums(rows: list[dict]) -> dict[str, float]:
    """Sums over episodes (rows with r1, r2, r2_no_hint, hint_tokens, leak) for a SUM all-reduce."""
    out = {k: 0.0 for k in HEADLINE}
    out.update(n=float(len(rows)), hints=0.0, hint_tokens=0.0, leaks=0.0, no_hint_n=0.0, acc_t2_no_hint=0.0)
    for r in rows:
        for k, v in per_problem(r["r1"], r["r2"]).items():
            out[k] += v
        if r.get("hint_tokens") is not None:
            out["hints"] += 1
            out["hint_tokens"] += r["hint_tokens"]
            out["leaks"] += float(r["leak"])
        if r.get("r2_no_hint") is not None:
            out["no_hint_n"] += 1
            out["acc_t2_no_hint"] += r["r2_no_hint"]
    return out


def means(tot: dict[str, float]) -> dict[str, float]:
    n = max(tot["n"], 1.0)
    out = {k: tot[k] / n for k in HEADLINE}
    if tot["hints"]:
        out.update(hint_tokens=tot["hint_tokens"] / tot["hints"], hint_leak_rate=tot["leaks"] / tot["hints"])
    if tot["no_hint_n"]:
        out["acc_t2_no_hint"] = tot["acc_t2_no_hint"] / tot["no_hint_n"]
        out["hint_gain"] = out["acc_t2"] - out["acc_t2_no_hint"]
    return out


def with_intervals(rows: list[dict]) -> dict[str, float]:
    """Means over problems with 95% intervals (``<name>_low``/``<name>_high``), greedy evaluation.

    A rate (acc@t1, fixes, breaks) gets a bootstrap interval. The two differences of paired pass/fail outcomes,
    delta(t1,t2) (turn 2 against turn 1 on the same problems) and the hint's gain (turn 2 with against without
    it), get McNemar's exact test instead, with its discordant counts (``_fixed``/``_broken``) and p-value
    (``_p``): a bootstrap of a handful of discordant problems claims gains the exact test does not.
    """
    out = means(sums(rows))
    if len(rows) < 2:
        return out
    r1, r2 = np.array([r["r1"] for r in rows]), np.array([r["r2"] for r in rows])
    for k in ("acc_t1", "acc_t2", "delta_i_to_c", "delta_c_to_i"):
        ci = bootstrap_ci(np.array([per_problem(r["r1"], r["r2"])[k] for r in rows]), outcomes=True)
        out[f"{k}_low"], out[f"{k}_high"] = ci.low, ci.high
    pairs = {"delta_t1_t2": (r1, r2)}
    if rows[0].get("r2_no_hint") is not None:
        no_hint = np.array([r["r2_no_hint"] for r in rows])
        ci = bootstrap_ci(no_hint, outcomes=True)
        out["acc_t2_no_hint_low"], out["acc_t2_no_hint_high"] = ci.low, ci.high
        pairs["hint_gain"] = (no_hint, r2)
    for k, (before, after) in pairs.items():
        cmp = paired_comparison(before, after)
        out.update({f"{k}_low": cmp.low, f"{k}_high": cmp.high, f"{k}_p": cmp.mcnemar_p,
                    f"{k}_fixed": float(cmp.candidate_only), f"{k}_broken": float(cmp.baseline_only)})
    return out
