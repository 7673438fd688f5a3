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
- :func:`seed_test`: two arms paired by seed (the same seed, the same warm start): the per-seed
  differences, their mean with a t interval over seeds, and the exact sign-flip permutation test
  (under the null each seed's difference is as likely negative as positive; every one of the 2^n sign
  patterns enumerated), the test at the unit of replication;
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


# ------------------------------------------------------------------ paired by seed


@dataclass(frozen=True)
class SeedTest:
    """Two arms paired by seed: the per-seed differences A − B, their mean and t interval over seeds, and the
    two-sided exact sign-flip permutation p of the mean (None, with :attr:`why`, where there is no test)."""

    differences: tuple[float, ...]
    mean: float
    low: float | None = None
    high: float | None = None
    p: float | None = None
    patterns: int = 0  # sign patterns enumerated: 2^n
    why: str = ""

    @property
    def smallest(self) -> float | None:
        """The smallest p this many seeds can give: all differences one sign, and its mirror (2 / 2^n)."""
        return min(1.0, 2.0 / self.patterns) if self.patterns else None


def seed_test(differences: Sequence[float], level: float = 0.95) -> SeedTest | None:
    """The seed-level test of paired per-seed differences: the mean, Student's t interval at ``level`` over the
    seeds (n − 1 degrees of freedom), and the exact sign-flip permutation p: the share of the 2^n ways of
    flipping the differences' signs whose |mean| is at least the observed |mean|. None for no seeds."""
    values = [float(d) for d in differences]
    if not values:
        return None
    mean = statistics.fmean(values)
    if len(values) < 2:
        return SeedTest(tuple(values), mean, why="one seed: no spread, no test")
    if len(values) > 20:
        raise ValueError(f"seed_test enumerates 2^n sign patterns: {len(values)} seeds is too many (at most 20)")
    from scipy import stats

    sd = statistics.stdev(values)
    low = high = None
    if sd > 0:
        half = float(stats.t.ppf(0.5 + level / 2, len(values) - 1)) * sd / math.sqrt(len(values))
        low, high = mean - half, mean + half
    elif mean != 0:
        low = high = mean
    if all(v == 0 for v in values):
        return SeedTest(tuple(values), mean, low, high, 1.0, 2 ** len(values))
    result = stats.permutation_test((np.asarray(values),), lambda x, axis=-1: np.abs(np.mean(x, axis=axis)), vectorized=True,
                                    permutation_type="samples", alternative="greater", n_resamples=np.inf)
    return SeedTest(tuple(values), mean, low, high, float(result.pvalue), 2 ** len(values))


def seed_test_power(effect: float, sd: float, seeds: int, alpha: float, *, draws: int = 4000, seed: int = SEED) -> float:
    """The chance that :func:`seed_test` gives p <= ``alpha`` when the per-seed differences are normal with mean
    ``effect`` and standard deviation ``sd`` over ``seeds`` seeds (a seeded simulation of ``draws`` experiments;
    the p of each from the exact sign-flip distribution)."""
    import itertools

    rng = np.random.default_rng(seed)
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=seeds)))  # 2^n x n
    samples = rng.normal(effect, sd, size=(draws, seeds))
    observed = np.abs(samples.mean(axis=1))
    flipped = np.abs(samples @ signs.T / seeds)  # draws x 2^n
    p = (flipped >= observed[:, None] - 1e-12).mean(axis=1)
    return float((p <= alpha).mean())


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
