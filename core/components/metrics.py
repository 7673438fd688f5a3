"""Valid/optimal rates and failure counts, overall and per group, with standard errors.

Generic over tasks: the caller says which groups (the task's declared groupings and the
benchmark's subsets) each verdict belongs to. The mean graded score (``Verdict.score``)
sits beside the rates.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envengineer.components import Verdict


@dataclass
class Rates:
    n: int = 0
    valid: int = 0
    optimal: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    score_sum: float = 0.0  # sum of the verdicts' graded scores
    graded: int = 0  # verdicts whose score says more than valid/invalid

    def add(self, verdict: Verdict) -> None:
        self.n += 1
        self.valid += verdict.valid
        self.optimal += verdict.optimal
        self.score_sum += verdict.score
        self.graded += verdict.graded
        if verdict.failure:
            self.failures[verdict.failure] += 1

    @property
    def mean_score(self) -> float:
        """The mean graded score (equal to the valid rate for a pass/fail task)."""
        return self.score_sum / self.n if self.n else 0.0

    @property
    def valid_rate(self) -> float:
        return self.valid / self.n if self.n else 0.0

    @property
    def optimal_rate(self) -> float:
        return self.optimal / self.n if self.n else 0.0

    @staticmethod
    def stderr(rate: float, n: int) -> float:
        return math.sqrt(rate * (1 - rate) / n) if n else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "valid": self.valid,
            "optimal": self.optimal,
            "valid_rate": round(self.valid_rate, 6),
            "optimal_rate": round(self.optimal_rate, 6),
            "valid_se": round(self.stderr(self.valid_rate, self.n), 6),
            "optimal_se": round(self.stderr(self.optimal_rate, self.n), 6),
            "failures": dict(sorted(self.failures.items())),
            "mean_score": round(self.mean_score, 6),
        }


@dataclass
class Summary:
    """Overall rates, and rates per value of each grouping (``by["size"]["6x6"]``)."""

    overall: Rates = field(default_factory=Rates)
    by: dict[str, dict[str, Rates]] = field(default_factory=lambda: defaultdict(dict))

    def add(self, verdict: Verdict, groups: Mapping[str, str] | None = None) -> None:
        self.overall.add(verdict)
        for dimension, value in (groups or {}).items():
            self.by[dimension].setdefault(str(value), Rates()).add(verdict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "overall": self.overall.to_dict(),
            "by": {dim: {key: rates.to_dict() for key, rates in values.items()} for dim, values in self.by.items()},
        }


def summarize(
    verdicts: Iterable[Verdict],
    groups: Iterable[Mapping[str, str]] | None = None,
    orders: Mapping[str, Sequence[str]] | None = None,
) -> Summary:
    """Aggregate verdicts; ``orders`` fixes the display order of group values."""
    summary = Summary()
    if orders:
        for dimension, values in orders.items():
            for value in values:
                summary.by[dimension][str(value)] = Rates()
    group_iter = iter(groups) if groups is not None else None
    for verdict in verdicts:
        summary.add(verdict, next(group_iter) if group_iter is not None else None)
    for dimension in list(summary.by):
        summary.by[dimension] = {k: v for k, v in summary.by[dimension].items() if v.n}
    return summary


def sign_test(gained: int, lost: int) -> float:
    """Two-sided exact sign test (McNemar's exact test) for paired pass/fail outcomes.

    ``gained``: items that fail before and pass after; ``lost``: the reverse. Items with
    the same outcome both times carry no information about the change and are left out.
    """
    n = gained + lost
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(gained, lost) + 1))
    return min(1.0, 2 * tail / 2**n)


def paired_change(before: Sequence[bool], after: Sequence[bool]) -> dict[str, Any]:
    """Per-item change between two runs on the same items, in the same order."""
    if len(before) != len(after):
        raise ValueError(f"paired_change: {len(before)} items before, {len(after)} after")
    gained = sum(1 for b, a in zip(before, after) if a and not b)
    lost = sum(1 for b, a in zip(before, after) if b and not a)
    return {"gained": gained, "lost": lost, "p": sign_test(gained, lost)}
