"""The statistics of a comparison of arms over seeds: pure functions, no I/O.

The paired sign tests (:func:`envengineer.metrics.sign_test`) compare two trained policies on
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

The t distribution is computed exactly through the regularized incomplete beta function (a
continued fraction, as Numerical Recipes' ``betacf``): scipy is not a dependency.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Splits enumerated exactly up to this many; beyond, a Monte Carlo with :data:`DRAWS` draws.
EXACT_LIMIT = 100_000
DRAWS = 20_000
SEED = 20260101  # the Monte Carlo's fixed seed: a report rewritten from the same runs gives the same p


# ------------------------------------------------------------------ the t distribution


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz), as NR's ``betacf``."""
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            return h
    raise ArithmeticError(f"incomplete beta: no convergence for a={a}, b={b}, x={x}")


def betai(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), for a, b > 0 and 0 ≤ x ≤ 1."""
    if a <= 0 or b <= 0 or not 0.0 <= x <= 1.0:
        raise ValueError(f"betai: need a, b > 0 and 0 <= x <= 1 (a={a}, b={b}, x={x})")
    if x in (0.0, 1.0):
        return x
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):  # where the fraction converges fast; else by symmetry
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf2(t: float, df: float) -> float:
    """The two-sided tail P(|T| ≥ |t|) of Student's t with ``df`` (> 0, not necessarily whole) degrees of freedom."""
    if df <= 0:
        raise ValueError(f"t distribution: df must be > 0 (got {df})")
    if math.isinf(t):
        return 0.0
    return min(1.0, betai(df / 2.0, 0.5, df / (df + t * t)))


def t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) for Student's t with ``df`` degrees of freedom."""
    half = t_sf2(t, df) / 2.0
    return 1.0 - half if t > 0 else half


def t_quantile(q: float, df: float) -> float:
    """The t with P(T ≤ t) = q, by bisection on :func:`t_cdf` (to about 1e-12)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"t quantile: q must be in (0, 1) (got {q})")
    if q < 0.5:
        return -t_quantile(1.0 - q, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


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
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se2 = va + vb
    if se2 == 0:
        return Welch(difference, why="sd 0 in both arms: permutation test only")
    se = math.sqrt(se2)
    df = se2 * se2 / ((va * va) / (len(a) - 1) + (vb * vb) / (len(b) - 1))
    t = difference / se
    half = t_quantile(0.5 + level / 2.0, df) * se
    return Welch(difference, difference - half, difference + half, t, df, t_sf2(t, df))


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
    values = np.asarray([*a, *b], dtype=float)
    n, k = len(values), len(a)
    total = values.sum()

    def gap(sum_a: np.ndarray | float) -> np.ndarray | float:
        return np.abs(sum_a / k - (total - sum_a) / (n - k))

    observed = float(gap(values[:k].sum()))
    tolerance = 1e-9 * max(1.0, float(np.abs(values).max()))  # equal differences that float sums split
    splits = math.comb(n, k)
    if splits <= limit:
        sums = np.fromiter((values[list(c)].sum() for c in itertools.combinations(range(n), k)), dtype=float, count=splits)
        hits = int(np.count_nonzero(gap(sums) >= observed - tolerance))
        return Permutation(hits / splits, splits, True)
    rng = np.random.default_rng(seed)
    sums = values[np.argsort(rng.random((draws, n)), axis=1)[:, :k]].sum(axis=1)
    hits = int(np.count_nonzero(gap(sums) >= observed - tolerance))
    return Permutation((1 + hits) / (1 + draws), draws, False)


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
