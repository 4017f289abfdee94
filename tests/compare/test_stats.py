"""The paired statistics against independent computations (SciPy, a hand-written Holm, the power of the
paired t-test by SciPy's noncentral t), and degenerate inputs stated as what they are, never significant."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, stats

from hardmix.compare.stats import holm_adjusted, min_detectable_effect, paired_difference
from tests.compare.markdown_tables import holm


def _power(effect: float, n: int, alpha: float = 0.05) -> float:
    crit = stats.t.ppf(1 - alpha / 2, n - 1)
    nc = effect * math.sqrt(n)
    # the lower tail vanishes for large effects (SciPy then returns NaN for it)
    return stats.nct.sf(crit, n - 1, nc) + np.nan_to_num(stats.nct.cdf(-crit, n - 1, nc))


@pytest.mark.parametrize("n, alpha", [(2, 0.05), (3, 0.05), (5, 0.05), (10, 0.05), (30, 0.05),
                                      (3, 0.025),  # where statsmodels' solve_power returned a wrong root
                                      (5, 0.05 / 7), (10, 0.05 / 7)])
def test_the_minimum_detectable_effect_has_80_percent_power(n, alpha):
    expected = optimize.brentq(lambda e: _power(e, n, alpha) - 0.8, 1e-3, 30.0)
    assert min_detectable_effect(n, alpha) == pytest.approx(expected, rel=1e-4)
    assert _power(min_detectable_effect(n, alpha), n, alpha) == pytest.approx(0.8, abs=1e-4)


def test_every_statistic_of_a_comparison_on_known_numbers():
    x = [52.1, 52.6, 51.9, 53.0, 52.4]
    y = [50.5, 51.0, 50.7, 51.9, 51.2]
    d = paired_difference(x, y)
    diffs = np.subtract(x, y)
    sd = diffs.std(ddof=1)
    assert d.sd == pytest.approx(sd, rel=1e-12)
    assert d.effect_size == pytest.approx(diffs.mean() / sd, rel=1e-12)
    d80 = optimize.brentq(lambda e: _power(e, 5) - 0.8, 1e-3, 30.0)
    assert d.min_detectable_difference == pytest.approx(d80 * sd, rel=1e-4)
    assert d.p_holm == d.p_value == pytest.approx(stats.ttest_rel(x, y).pvalue, rel=1e-10)


def test_holm_over_a_task_s_family_matches_the_step_down_by_hand():
    rng = np.random.default_rng(0)
    base = rng.normal(50, 1, 4)
    runs = {f"s{i}": base + rng.normal(shift, 0.5, 4) for i, shift in enumerate([0.1, 1.5, -2.0, 0.6, 3.0])}
    family = {k: paired_difference(list(x), list(base)) for k, x in runs.items()}
    family["one seed"] = paired_difference([1.0], [0.0])
    adjusted = holm_adjusted(family)
    tested = list(runs)
    by_hand = holm([stats.ttest_rel(runs[k], base).pvalue for k in tested])
    for k, p in zip(tested, by_hand):
        assert adjusted[k].p_holm == pytest.approx(p, rel=1e-12)
        assert adjusted[k].p_value == family[k].p_value  # the raw p-value is kept beside it
        expected = ("better" if family[k].mean > 0 else "worse") if p < 0.05 else "n.s."
        assert adjusted[k].verdict == expected
    assert adjusted["one seed"] == family["one seed"]  # not part of the family, verdict unchanged
    # a p-value significant alone can stop being so in the family, never the reverse
    assert all(adjusted[k].p_holm >= family[k].p_value for k in tested)


def test_degenerate_inputs_get_their_own_verdicts():
    assert paired_difference([], []).verdict == "too few seeds"
    one = paired_difference([2.0], [1.0])
    assert one.verdict == "too few seeds" and one.mean == 1.0 and math.isnan(one.p_value)
    nan = paired_difference([1.0, math.nan, 3.0], [1.0, 2.0, 2.0])
    assert nan.verdict == "NaN score" and math.isnan(nan.mean) and nan.n == 3
    assert paired_difference([1.0, 2.0], [1.0, math.inf]).verdict == "NaN score"
    flat = paired_difference([51.0, 52.0, 53.0], [50.0, 51.0, 52.0])
    assert flat.verdict == "no spread" and flat.mean == pytest.approx(1.0) and math.isnan(flat.p_value)
    # rounding noise is not spread: 0.1 added in floating point leaves differences ~1e-15 apart
    noisy = paired_difference([0.1 + v for v in (1.7, 2.9, 3.3)], [1.7, 2.9, 3.3])
    assert noisy.verdict == "no spread"
    with pytest.raises(ValueError, match="same seeds"):
        paired_difference([1.0, 2.0], [1.0])


scores = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(scores, scores), min_size=0, max_size=8), st.booleans())
def test_a_verdict_is_significant_only_for_a_real_test_below_alpha(pairs, inject_nan):
    x, y = [a for a, _ in pairs], [b for _, b in pairs]
    if inject_nan and pairs:
        x[len(x) // 2] = math.nan
    d = paired_difference(x, y)
    assert d.verdict in ("better", "worse", "n.s.", "too few seeds", "NaN score", "no spread")
    if d.verdict in ("better", "worse"):
        diffs = np.subtract(x, y)
        assert len(pairs) >= 2 and np.isfinite(diffs).all() and diffs.std(ddof=1) > 0
        assert d.p_holm < 0.05 and d.p_value == pytest.approx(stats.ttest_rel(x, y).pvalue, rel=1e-9)
        assert (d.verdict == "better") == (diffs.mean() > 0)
        assert d.ci_low > 0 or d.ci_high < 0  # the interval excludes 0 when the test is significant
    if inject_nan and pairs:
        assert d.verdict == "NaN score"
    elif len(pairs) < 2:
        assert d.verdict == "too few seeds"
    if d.verdict not in ("better", "worse", "n.s."):
        assert math.isnan(d.p_value) and math.isnan(d.p_holm)


@settings(max_examples=10, deadline=None)  # statsmodels' Holm runs gc.collect() at every call: slow here
@given(st.lists(st.lists(scores, min_size=3, max_size=3), min_size=1, max_size=6), scores)
def test_holm_never_makes_a_comparison_more_significant(rows, shift):
    base = [0.0, 1.0, 2.5]
    family = {str(i): paired_difference(r, base) for i, r in enumerate(rows)}
    family["flat"] = paired_difference([b + shift for b in base], base)
    adjusted = holm_adjusted(family)
    assert adjusted["flat"].verdict == "no spread"
    for k, d in adjusted.items():
        if d.tested:
            assert d.p_holm >= family[k].p_value - 1e-15 and d.p_holm <= 1.0
        else:
            assert d.verdict not in ("better", "worse")


def _sign_flip_by_enumeration(x, y):
    """The exact two-sided sign-flip p written out: every sign pattern of the differences, counting those
    whose |sum| is at least the observed |sum| (ties count, up to rounding of the sums)."""
    import itertools

    d = [a - b for a, b in zip(x, y)]
    observed = abs(sum(d))
    tol = 1e-9 * max(1.0, *(abs(v) for v in d))
    hits = sum(abs(sum(s * v for s, v in zip(signs, d))) >= observed - tol
               for signs in itertools.product((1, -1), repeat=len(d)))
    return hits / 2 ** len(d)


# Scores as the tasks report them (two decimals), so that ties among sign patterns really happen.
two_decimals = st.integers(min_value=-3000, max_value=3000).map(lambda v: v / 100)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(two_decimals, two_decimals), min_size=2, max_size=10))
def test_the_exact_sign_flip_p_matches_enumerating_every_sign_pattern(pairs):
    x, y = [a for a, _ in pairs], [b for _, b in pairs]
    d = paired_difference(x, y)
    assert d.p_exact == pytest.approx(_sign_flip_by_enumeration(x, y), abs=1e-12)
    assert d.p_exact_min == 2 / 2 ** len(pairs) and d.p_exact >= d.p_exact_min - 1e-15


def test_near_zero_ties_count_as_at_least_as_extreme():
    """The example hypothesis found against SciPy's permutation_test (its tolerance scales with the
    statistic, so near 0 it split ties by rounding): 0.96875 where the enumeration gives 1."""
    pairs = [(13.84, 9.34), (-14.6, 0.0), (0.37, 15.86), (5.12, -19.17), (5.8, 0.0), (0.0, 0.0), (0.0, 0.0),
             (0.0, 4.48)]
    x, y = [a for a, _ in pairs], [b for _, b in pairs]
    assert paired_difference(x, y).p_exact == _sign_flip_by_enumeration(x, y) == 1.0


def test_five_seeds_all_better_cannot_pass_the_exact_test_ten_can():
    """With 5 seeds all positive the exact test cannot go below 1/16; with 10 it can."""
    five = paired_difference([51.0, 52.0, 51.5, 52.5, 51.2], [50.0, 50.1, 50.2, 50.3, 50.4])
    assert five.verdict == "better" and five.p_exact == 0.0625 and five.p_exact == five.p_exact_min
    ten = paired_difference([51.0 + i / 10 for i in range(10)], [50.0 + i / 11 for i in range(10)])
    assert ten.p_exact == pytest.approx(2 / 1024) and ten.p_exact < 0.05


def test_the_exact_p_is_holm_adjusted_over_the_t_test_s_family():
    family = {
        "a": paired_difference([3.0, 4.0, 5.0, 6.0, 7.0, 8.0], [0.0] * 6),
        "b": paired_difference([1.0, -0.5, 2.0, 0.3, -0.2, 1.1], [0.0] * 6),
        "c": paired_difference([2.0, 1.0, 3.0, 2.5, 1.5, -0.1], [0.0] * 6),
    }
    adjusted = holm_adjusted(family)
    expected = holm([family[k].p_exact for k in "abc"])
    assert [adjusted[k].p_exact_holm for k in "abc"] == pytest.approx(expected)


def test_in_a_family_the_detectable_difference_is_at_holm_s_strictest_alpha():
    """The verdicts of a family of m use Holm's thresholds, the strictest alpha / m: the detectable
    difference each comparison states is the one found with 80% power there (by the noncentral t)."""
    family = {
        "a": paired_difference([3.0, 4.0, 5.0, 6.5, 7.0, 8.0], [0.0] * 6),
        "b": paired_difference([1.0, -0.5, 2.0, 0.3, -0.2, 1.1], [0.0] * 6),
        "c": paired_difference([2.0, 1.0, 3.0, 2.5, 1.5, -0.1], [0.0] * 6),
    }
    for k, d in holm_adjusted(family).items():
        effect = d.min_detectable_difference / d.sd
        assert _power(effect, 6, alpha=0.05 / 3) == pytest.approx(0.8, abs=1e-4), k
        assert d.min_detectable_difference > family[k].min_detectable_difference  # stricter than alone
