"""Paired statistics of strategies against the baseline, over the seeds both ran.

For seeds s = 1..n with scores x_s (strategy) and y_s (baseline), the differences d_s = x_s - y_s give:

- the mean difference and its 95% confidence interval ``mean +- t_{0.975, n-1} * sd / sqrt(n)``, where
  ``sd`` is the sample standard deviation of the differences;
- the paired t-test's two-sided p-value (:func:`scipy.stats.ttest_rel`);
- ``p_holm``: the p-value adjusted by Holm's step-down method over the family of comparisons of one task
  (every strategy against the same baseline; :func:`statsmodels.stats.multitest.multipletests`). A single
  comparison is a family of one (``p_holm == p_value``); :func:`holm_adjusted` adjusts a family;
- ``effect_size``: the paired (standardized) effect ``mean / sd`` (Cohen's d_z);
- ``min_detectable_difference``: the difference the paired t-test would detect with 80% power (two-sided)
  with these n seeds, assuming the differences' standard deviation is the observed ``sd``: the effect
  size solved on the noncentral t (:func:`min_detectable_effect`), times ``sd``, at the alpha the verdict
  uses: alpha for a family of one, and in a family of m comparisons alpha / m, the strictest threshold of
  Holm's step-down (so a difference that large is found with 80% power whatever the other comparisons' p);
- ``p_exact``: the exact sign-flip (permutation) test's two-sided p-value, which assumes no distribution of
  the differences: under the null each d_s is as likely to have either sign, so the 2^n sign patterns are
  equally likely, and p is the fraction whose |sum| is at least the observed one (ties count as at least as
  extreme; :func:`sign_flip_p`, every pattern enumerated). It cannot go below
  ``p_exact_min`` = 2 / 2^n (n = 5: 0.0625; n = 10: 0.002), whatever the differences; ``p_exact_holm`` is
  its Holm adjustment over the same family. Before any run, :func:`exact_floor` says how low
  ``p_exact_holm`` can go in a family of m comparisons over n seeds (m x 2 / 2^n) and how many seeds an
  exact verdict needs;
- ``ci_simultaneous``: the family's simultaneous interval, Bonferroni: ``mean +- t_{1 - alpha/(2m), n-1} *
  sd / sqrt(n)`` over the m tested comparisons of the task (the 95% interval for a family of one;
  :func:`holm_adjusted`). Holm is uniformly more powerful than Bonferroni, so in rare cases a verdict
  (Holm's) is significant while its simultaneous interval touches 0; the verdict stays Holm's.

The verdict is "better" or "worse" only when ``p_holm`` < ``alpha``, else "n.s." (not significant).
:func:`exact_test_agrees` says whether the exact test's ``p_exact_holm`` is below ``alpha`` too; a verdict
that rests on the t-test alone (on the normality of the differences) is labelled so in every table.
Degenerate inputs are stated as what they are, never as significant: "too few seeds" (fewer than 2 pairs:
no test), "NaN score" (a score is NaN or infinite: no statistic is computed), "no spread" (every
difference is the same, up to floating-point rounding: the t-test is undefined; ``mean`` is still given).

Example:
    >>> d = paired_difference([52.1, 52.6, 51.9], [50.5, 51.0, 50.7])
    >>> round(d.mean, 3), d.n, d.verdict, d.p_holm == d.p_value
    (1.467, 3, 'better', True)
    >>> family = holm_adjusted({"a": d, "b": paired_difference([50.0, 52.0, 49.0], [51.0, 50.5, 50.0])})
    >>> round(family["a"].p_holm / d.p_value, 6), family["b"].verdict
    (2.0, 'n.s.')
    >>> paired_difference([1.0, 2.0], [0.0, 1.0]).verdict
    'no spread'

    Three seeds, all better: the t-test says so, the exact test cannot (2 / 2^3 = 0.25 at best):

    >>> d.p_exact, d.p_exact_min, exact_test_agrees(d)
    (0.25, 0.25, False)

    In the family of two, each simultaneous interval is Bonferroni's (t at 1 - 0.05/4), wider than 95%:

    >>> a = family["a"]
    >>> a.ci_simultaneous_method, a.ci_simultaneous[0] < a.ci_low
    ('Bonferroni, 2 comparisons', True)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import stats

ALPHA = 0.05
POWER = 0.8
SIGNIFICANT = ("better", "worse")
NOT_SIGNIFICANT = "n.s."
TOO_FEW = "too few seeds"
NAN_SCORE = "NaN score"
NO_SPREAD = "no spread"
FEW_SEEDS = 5  # below this many seeds the report says in words what the test cannot see

# Differences whose standard deviation is below this fraction of the scores' magnitude are rounding noise.
_RELATIVE_SPREAD = 1e-9


@dataclass(frozen=True)
class PairedDifference:
    """Strategy minus baseline over paired seeds.

    Attributes:
        mean: the mean difference; ci_low, ci_high: its 95% confidence interval (NaN without a test).
        p_value: the paired t-test's two-sided p-value (NaN without a test).
        n: the number of paired seeds.
        verdict: "better", "worse", "n.s.", "too few seeds", "NaN score" or "no spread".
        sd: the sample standard deviation of the differences (NaN for n < 2).
        effect_size: ``mean / sd`` (NaN without a test).
        min_detectable_difference: the difference detected with 80% power with n seeds and this ``sd`` at
            the verdict's alpha (0.05 / m in a family of m: :func:`holm_adjusted`; NaN without a test).
        p_holm: the Holm-adjusted p-value within the task's family of comparisons (NaN without a test).
        p_exact: the exact sign-flip test's two-sided p-value (NaN for NaN scores or fewer than 2 pairs).
        p_exact_holm: ``p_exact`` Holm-adjusted within the task's family.
        p_exact_min: the smallest ``p_exact`` that n pairs can give, 2 / 2^n.
        ci_simultaneous: (low, high), the simultaneous interval over the task's family of m tested
            comparisons, Bonferroni: ``mean +- t_{1 - alpha/(2m), n-1} sd / sqrt(n)`` (NaN without a test).
        ci_simultaneous_method: how it was computed, e.g. ``"Bonferroni, 4 comparisons"`` (None without a
            test).
    """

    mean: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int
    verdict: str
    sd: float = math.nan
    effect_size: float = math.nan
    min_detectable_difference: float = math.nan
    p_holm: float = math.nan
    p_exact: float = math.nan
    p_exact_holm: float = math.nan
    p_exact_min: float = math.nan
    ci_simultaneous: tuple[float, float] = (math.nan, math.nan)
    ci_simultaneous_method: str | None = None

    @property
    def tested(self) -> bool:
        """Whether a t-test was computed (the verdict is better, worse or n.s.)."""
        return math.isfinite(self.p_value)


def verdict_for(mean: float, p: float, alpha: float = ALPHA) -> str:
    """"better"/"worse" when ``p`` < ``alpha``, else "n.s."."""
    if p < alpha:
        return "better" if mean > 0 else "worse"
    return NOT_SIGNIFICANT


def sign_flip_p(differences: np.ndarray) -> float:
    """The exact two-sided sign-flip p-value of paired differences ``(n,)``: the fraction of the 2^n sign
    patterns whose |sum| is at least the observed |sum|, every pattern enumerated. Sums equal to the
    observed one up to rounding (within 1e-9 of the differences' scale) count as ties, at least as
    extreme: scores reported to two decimals tie often, and SciPy's ``permutation_test`` scales its
    tolerance by the statistic, so near zero it splits such ties by rounding.

    >>> sign_flip_p(np.array([1.0, 2.0, 3.0, 4.0]))   # only all-plus and all-minus are as extreme
    0.125
    """
    d = np.asarray(differences, dtype=np.float64)
    n = d.size
    if n > 20:
        raise ValueError(f"the exact sign-flip test enumerates 2^n patterns: n = {n} is too many")
    observed = abs(float(d.sum())) - 1e-9 * max(1.0, float(np.abs(d).max(initial=0.0)))
    bits = np.arange(n)
    hits = 0
    for start in range(0, 2**n, 1 << 16):  # chunks of 65,536 patterns: memory stays small at n = 20
        codes = np.arange(start, min(2**n, start + (1 << 16)))
        signs = 1.0 - 2.0 * ((codes[:, None] >> bits) & 1)  # (chunk, n) of +-1
        hits += int(np.count_nonzero(np.abs(signs @ d) >= observed))
    return hits / 2**n


def exact_floor(m: int, n: int, alpha: float = ALPHA) -> tuple[float, int]:
    """The smallest Holm-adjusted exact p a family of ``m`` comparisons over ``n`` seeds can give, m x 2 /
    2^n (Holm's first step on the smallest ``p_exact``, 2 / 2^n; capped at 1), and the fewest seeds for
    which it is below ``alpha`` (an exact verdict is possible).

    >>> exact_floor(2, 5), exact_floor(4, 10), exact_floor(1, 5)
    ((0.125, 7), (0.0078125, 8), (0.0625, 6))
    """
    if m < 1:
        raise ValueError(f"a family has at least one comparison, got {m}")
    needed = 1
    while m * 2.0 / 2**needed >= alpha:
        needed += 1
    return min(1.0, m * 2.0 / 2**n), needed


def exact_test_agrees(d: PairedDifference, alpha: float = ALPHA) -> bool:
    """Whether the exact sign-flip test, Holm-adjusted like the t-test, also finds the difference
    (``p_exact_holm`` < ``alpha``)."""
    return math.isfinite(d.p_exact_holm) and d.p_exact_holm < alpha


@functools.lru_cache(maxsize=256)
def min_detectable_effect(n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The standardized effect (mean / sd of the differences) a two-sided paired t-test over ``n`` pairs
    detects with ``power`` at ``alpha``: the root of the power under the noncentral t (SciPy's ``nct``,
    Brent's method). statsmodels' ``TTestPower.solve_power`` is not used: at small n and small alpha
    (3 pairs at 0.025) its power turns NaN inside the bracket and it returns a wrong root.

    >>> round(min_detectable_effect(10), 3)
    0.996
    """
    from scipy import optimize

    if n < 2:
        return math.nan
    df, crit = n - 1, float(stats.t.ppf(1 - alpha / 2, n - 1))

    def shortfall(effect: float) -> float:
        nc = effect * math.sqrt(n)
        lower = float(stats.nct.cdf(-crit, df, nc))
        return float(stats.nct.sf(crit, df, nc)) + (lower if math.isfinite(lower) else 0.0) - power

    return float(optimize.brentq(shortfall, 1e-6, 100.0, xtol=1e-10))


def paired_difference(
    scores: list[float], baseline: list[float], alpha: float = ALPHA, confidence: float = 0.95
) -> PairedDifference:
    """Paired comparison of ``scores`` with ``baseline`` (the same seeds, in the same order), as a family
    of one (``p_holm == p_value``; :func:`holm_adjusted` adjusts a task's family)."""
    x, y = np.asarray(scores, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"paired scores need the same seeds: {x.shape[0]} against {y.shape[0]}")
    n = int(x.size)
    nan = math.nan
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        return PairedDifference(nan, nan, nan, nan, n, NAN_SCORE)
    d = x - y
    if n < 2:
        return PairedDifference(float(d.mean()) if n else nan, nan, nan, nan, n, TOO_FEW)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    exact = sign_flip_p(d)
    exact_fields = {"p_exact": exact, "p_exact_holm": exact, "p_exact_min": 2.0 / 2**n}
    scale = max(1.0, float(np.abs(x).max()), float(np.abs(y).max()))
    if sd <= _RELATIVE_SPREAD * scale:
        return PairedDifference(mean, nan, nan, nan, n, NO_SPREAD, sd=sd, **exact_fields)
    p = float(stats.ttest_rel(x, y).pvalue)
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    return PairedDifference(
        mean, mean - half, mean + half, p, n, verdict_for(mean, p, alpha), sd=sd, effect_size=mean / sd,
        min_detectable_difference=min_detectable_effect(n, alpha) * sd, p_holm=p, **exact_fields,
        **simultaneous(mean, sd, n, 1, alpha),
    )


def simultaneous(mean: float, sd: float, n: int, m: int, alpha: float = ALPHA) -> dict[str, Any]:
    """The fields of a comparison's simultaneous interval in a family of ``m`` tested comparisons:
    Bonferroni's ``mean +- t_{1 - alpha/(2m), n-1} sd / sqrt(n)``.

    >>> simultaneous(1.0, 1.0, 10, 1)["ci_simultaneous_method"]
    'Bonferroni, 1 comparison'
    """
    half = float(stats.t.ppf(1 - alpha / (2 * m), n - 1)) * sd / math.sqrt(n)
    return {"ci_simultaneous": (mean - half, mean + half),
            "ci_simultaneous_method": f"Bonferroni, {m} comparison{'s' if m != 1 else ''}"}


def holm_adjusted(family: dict[str, PairedDifference], alpha: float = ALPHA) -> dict[str, PairedDifference]:
    """The family (e.g. every strategy of a task against the baseline) with ``p_holm`` adjusted by Holm's
    method over the comparisons that have a test, verdicts that follow it, and each comparison's
    simultaneous (Bonferroni) interval over those m comparisons. Comparisons without a test (too few seeds,
    a NaN score, no spread) keep their verdict and are not counted in the family."""
    from statsmodels.stats.multitest import multipletests

    tested = [k for k, d in family.items() if d.tested]
    out = dict(family)
    if tested:
        adjusted = multipletests([family[k].p_value for k in tested], alpha=alpha, method="holm")[1]
        strictest = alpha / len(tested)  # Holm's first step: what min_detectable_difference is computed at
        for k, p in zip(tested, adjusted):
            d = family[k]
            out[k] = replace(d, p_holm=float(p), verdict=verdict_for(d.mean, float(p), alpha),
                             min_detectable_difference=min_detectable_effect(d.n, strictest) * d.sd,
                             **simultaneous(d.mean, d.sd, d.n, len(tested), alpha))
    exact = [k for k in tested if math.isfinite(family[k].p_exact)]  # the same family as the t-test's
    if exact:
        adjusted = multipletests([family[k].p_exact for k in exact], alpha=alpha, method="holm")[1]
        for k, p in zip(exact, adjusted):
            out[k] = replace(out[k], p_exact_holm=float(p))
    return out


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    a = np.asarray(values, dtype=np.float64)
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


__all__ = [
    "ALPHA",
    "FEW_SEEDS",
    "NAN_SCORE",
    "NOT_SIGNIFICANT",
    "NO_SPREAD",
    "PairedDifference",
    "SIGNIFICANT",
    "TOO_FEW",
    "exact_floor",
    "exact_test_agrees",
    "holm_adjusted",
    "mean_std",
    "min_detectable_effect",
    "paired_difference",
    "sign_flip_p",
    "simultaneous",
    "verdict_for",
]
