"""Self-correction metrics: paired pass/fail differences are tested exactly, not bootstrapped."""

import pytest

from distlab.recipes.score.metrics import with_intervals


def _rows(fixed: int, broken: int, both: int, neither: int) -> list[dict]:
    spec = [(0.0, 1.0)] * fixed + [(1.0, 0.0)] * broken + [(1.0, 1.0)] * both + [(0.0, 0.0)] * neither
    return [{"task_id": str(i), "r1": a, "r2": b, "r2_no_hint": None, "hint_tokens": None, "leak": False}
            for i, (a, b) in enumerate(spec)]


def test_three_fixes_and_no_breaks_of_128_is_not_a_significant_delta():
    """The SCoRe CPU demo's final evaluation: +2.3 pp from 3 fixes, 0 breaks (a bootstrap said [+0.8, +6.2])."""
    m = with_intervals(_rows(fixed=3, broken=0, both=60, neither=65))
    assert m["delta_t1_t2"] == pytest.approx(3 / 128)
    assert (m["delta_t1_t2_fixed"], m["delta_t1_t2_broken"]) == (3.0, 0.0)
    assert m["delta_t1_t2_p"] == pytest.approx(0.25)
    assert m["delta_t1_t2_low"] < 0 < m["delta_t1_t2_high"]


def test_many_more_breaks_than_fixes_is_significant():
    m = with_intervals(_rows(fixed=6, broken=18, both=40, neither=64))
    assert m["delta_t1_t2"] == pytest.approx(-12 / 128)
    assert m["delta_t1_t2_p"] == pytest.approx(0.0227, abs=1e-4)
    assert m["delta_t1_t2_high"] < 0
