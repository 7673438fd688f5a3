"""The statistics of a comparison of arms over seeds: pure functions, no I/O.

The paired sign tests (:func:`envengineer.components.metrics.sign_test`) compare two trained policies on
the same instances; they say nothing about how much an arm's result moves from seed to seed.
These functions take the seed as the unit: each arm is a handful of per-seed values, and an arm
is compared with the baseline by

- :func:`welch`: Welch's two-sample t test and its 95% confidence interval for the difference of
  the means (normal per-seed values, variances not assumed equal);
- :func:`permutation_test`: the exact two-sample permutation test of the difference of the means
  (no distribution assumed; exchangeable seeds under the null), every split enumerated when there
  are at most :data:`EXACT_LIMIT`, else a seeded Monte Carlo, so the same values give the same p;
- :func:`holm`: Holm's step-down adjustment of a family of p-values (each arm against the
  baseline), which keeps the chance of any false rejection in the family at the level.

Both tests are scipy.stats' (``ttest_ind`` with ``equal_var=False`` and its confidence interval;
``permutation_test``), imported when a comparison is computed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Splits enumerated exactly up to this many; beyond, a Monte Carlo with :data:`DRAWS` draws.
EXACT_LIMIT = 100_000
DRAWS = 20_000
SEED = 20260101  # the Monte Carlo's fixed seed: a report rewritten from the same runs gives the same p


# ------------------------------------------------------------------ two samples


@dataclass(frozen=True)
class Welch:
    """Welch's test of mean(a) − mean(b): the difference, its CI, t, the Satterthwaite df and the two-sided p.
    ``t``, ``df``, ``p`` and the interval are None when the test is undefined (see :attr:`why`)."""

    difference: float
    low: float | None = None
    high: float | None = None
    t: float | None = None
    df: float | None = None
    p: float | None = None
    why: str = ""  # why there is no test, when there is none


def welch(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Welch | None:
    """Welch's two-sample t test and the ``level`` confidence interval of mean(a) − mean(b);
    None when either sample is empty. It assumes each sample normal, variances free."""
    if not a or not b:
        return None
    difference = statistics.fmean(a) - statistics.fmean(b)
    if len(a) < 2 or len(b) < 2:
        return Welch(difference, why="one seed in an arm: no spread, no test")
    from scipy import stats

    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return Welch(difference, why="sd 0 in both arms: permutation test only")
    test = stats.ttest_ind(a, b, equal_var=False)
    interval = test.confidence_interval(level)
    return Welch(difference, float(interval.low), float(interval.high), float(test.statistic), float(test.df), float(test.pvalue))


@dataclass(frozen=True)
class Permutation:
    """A two-sample permutation test: the two-sided p, the splits counted, and whether all were enumerated."""

    p: float
    splits: int
    exact: bool

    @property
    def smallest(self) -> float:
        """The smallest p this test can give: the observed split and its mirror, of all splits (exact only)."""
        return min(1.0, 2.0 / self.splits) if self.exact else 1.0 / (self.splits + 1)


def permutation_test(a: Sequence[float], b: Sequence[float], *, limit: int = EXACT_LIMIT, draws: int = DRAWS,
                     seed: int = SEED) -> Permutation | None:
    """Two-sided permutation test of mean(a) − mean(b): the share of the ways of splitting the pooled values
    into groups of len(a) and len(b) whose |difference of means| is at least the observed one. Every split
    when there are at most ``limit``; else ``draws`` seeded random splits, p = (1 + hits) / (1 + draws).
    None when either sample is empty."""
    if not a or not b:
        return None
    from scipy import stats

    splits = math.comb(len(a) + len(b), len(a))
    exact = splits <= limit or draws >= splits  # scipy enumerates every split when the draws would cover them

    def gap(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.abs(np.mean(x, axis=axis) - np.mean(y, axis=axis))

    result = stats.permutation_test((np.asarray(a, dtype=float), np.asarray(b, dtype=float)), gap, vectorized=True,
                                    permutation_type="independent", alternative="greater",
                                    n_resamples=np.inf if exact else draws, rng=np.random.default_rng(seed))
    return Permutation(float(result.pvalue), splits if exact else draws, exact)


# ------------------------------------------------------------------ families and summaries


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values, in the order given (None stays None and is not counted):
    the i-th smallest of m is multiplied by m − i + 1, kept at least the previous one, capped at 1."""
    present = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    m = len(present)
    adjusted: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(present):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def area_under_rounds(rates: Sequence[float | None]) -> float | None:
    """The rate averaged over the rounds (round 0 … last): the area under the per-round curve drawn as
    steps, over the number of rounds. An arm that learns early scores higher than one that gets to the
    same last round late. None when a round is missing (a mean over other rounds is another figure)."""
    if not rates or any(r is None for r in rates):
        return None
    return statistics.fmean(rates)  # type: ignore[arg-type]
