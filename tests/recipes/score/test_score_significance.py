"""Paired significance of graded differences (SCoRe's change of delta(t1,t2)) from the exact sign-flip test (review F2).

The 2026-11-26 intrinsic MBPP arm reported a delta change of +1.0 [+0.2, +2.2] pp as significant (bolded): six
problems changed by +1 and one by -1. Flipping the seven signs gives 128 equally likely patterns, of which 16 have
|sum| >= 5 (k = 0, 1, 6 or 7 plus signs: 1 + 7 + 7 + 1), so p = 0.125: not significant.
"""

import numpy as np
import pytest

from distlab.recipes.lm.eval.passk import paired_comparison, sign_flip_p
from distlab.recipes.score.evaluate import paired_changes


def test_six_up_one_down_is_p_one_eighth():
    assert sign_flip_p([1, 1, 1, 1, 1, 1, -1] + [0] * 493) == 0.125


def test_hand_counted_sign_flip_p_values():
    assert sign_flip_p([0.0, 0.0]) == 1.0  # nothing changed
    # |d| = 2, 1, 1, 1 with sum 3: of 16 sign patterns, 8 reach |sum| >= 3 (5, 3, 3, 3 and their mirrors)
    assert sign_flip_p([2, 1, 1, -1]) == 0.5
    assert sign_flip_p([1] * 9) == pytest.approx(2 / 2 ** 9)  # all nine up: only the two extreme patterns
    assert sign_flip_p([0.5, -0.5, 0.5, -0.5]) == 1.0  # mean 0


def _rows(pairs: list[tuple[float, float]]) -> list[dict]:
    return [{"r1": r1, "r2": r2} for r1, r2 in pairs]


def test_the_delta_change_of_six_fixes_and_one_break_is_not_significant():
    """500 problems, before: every turn 2 equal to turn 1 (all wrong). After: six turn 2s fix a wrong y1 (delta +1
    each) and one turn 2 breaks a right y1 (-1). delta change = (6 - 1) / 500 = +1.0 pp, p = 0.125."""
    before = _rows([(0.0, 0.0)] * 500)
    after = _rows([(0.0, 1.0)] * 6 + [(1.0, 0.0)] + [(0.0, 0.0)] * 493)
    out = paired_changes(before, after)
    assert out["delta_change"] == pytest.approx(0.01)
    assert out["delta_change_p"] == 0.125 and out["delta_change_significant"] is False
    assert out["delta_change_low"] > 0  # the bootstrap interval still excludes 0: it describes, it does not test
    # Acc@t2 is pass/fail: six fixed, none broken is McNemar's 2 / 2**6, significant; Acc@t1: 1 vs 0, p = 1
    assert out["acc_t2_change_p"] == pytest.approx(2 / 2 ** 6) and out["acc_t2_change_significant"] is True
    assert out["acc_t1_change_p"] == pytest.approx(1.0) and out["acc_t1_change_significant"] is False


def test_graded_comparison_names_its_test():
    res = paired_comparison(np.zeros(10), np.array([2.0, 1, 1, -1, 0, 0, 0, 0, 0, 0]))
    assert (res.sign_flip_p, res.nonzero, res.mcnemar_p, res.significant) == (0.5, 4, None, False)
    assert res.method.startswith("exact sign-flip p") and res.p_value == 0.5
