"""Paired statistics of a strategy against the baseline, over the seeds both ran.

For seeds s = 1..n with scores x_s (strategy) and y_s (baseline), the differences d_s = x_s - y_s give the
mean difference, its 95% confidence interval ``mean +- t_{0.975, n-1} * sd / sqrt(n)`` and the paired
t-test's two-sided p-value (:func:`scipy.stats.ttest_rel`). The verdict is "better" or "worse" when
p < ``alpha`` (the interval then excludes 0), else "no significant difference"; with fewer than 2 paired
seeds there is no test ("too few seeds").

Example:
    >>> d = paired_difference([52.1, 52.6, 51.9], [50.5, 51.0, 50.7])
    >>> round(d.mean, 3), d.n, d.verdict
    (1.467, 3, 'better')
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class PairedDifference:
    """Strategy minus baseline over paired seeds.

    Attributes:
        mean: the mean difference; ci_low, ci_high: its 95% confidence interval (NaN for n < 2).
        p_value: the paired t-test's two-sided p-value (NaN for n < 2, or 1.0 when every difference is 0).
        n: the number of paired seeds.
        verdict: "better", "worse", "no significant difference" or "too few seeds".
    """

    mean: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int
    verdict: str


def paired_difference(
    scores: list[float], baseline: list[float], alpha: float = 0.05, confidence: float = 0.95
) -> PairedDifference:
    """Paired comparison of ``scores`` with ``baseline`` (the same seeds, in the same order)."""
    x, y = np.asarray(scores, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"paired scores need the same seeds: {x.shape[0]} against {y.shape[0]}")
    d = x - y
    n = int(d.size)
    if n == 0:
        return PairedDifference(math.nan, math.nan, math.nan, math.nan, 0, "too few seeds")
    mean = float(d.mean())
    if n < 2:
        return PairedDifference(mean, math.nan, math.nan, math.nan, n, "too few seeds")
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        p = 1.0 if mean == 0.0 else 0.0
        half = 0.0
    else:
        p = float(stats.ttest_rel(x, y).pvalue)
        half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    verdict = "no significant difference"
    if p < alpha:
        verdict = "better" if mean > 0 else "worse"
    return PairedDifference(mean, mean - half, mean + half, p, n, verdict)


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    a = np.asarray(values, dtype=np.float64)
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


__all__ = ["PairedDifference", "mean_std", "paired_difference"]
