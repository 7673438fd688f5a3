"""What a task family declares and exchanges: its verdicts, projections and generation results,
its groupings, knobs and benchmarks (with their subsets and aggregates).

The core, the context modules, the baselines and the report know a task only through these
declarations. Import them from :mod:`envengineer.api` (or :mod:`envengineer.components`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

@dataclass(frozen=True)
class Verdict:
    """The validator's judgement of one response to one instance.

    ``score`` is a graded judgement in [0, 1] beside ``valid``/``optimal`` (partial credit,
    e.g. the share of sub-answers right); a validator that gives none gets 1.0 for a valid
    response and 0.0 otherwise.
    """

    valid: bool
    optimal: bool
    failure: str | None
    failed_checks: tuple[str, ...] = ()
    cost: int | None = None
    score: float | None = None  # None: 1.0 if valid else 0.0

    def __post_init__(self) -> None:
        if self.score is None:
            object.__setattr__(self, "score", 1.0 if self.valid else 0.0)
        else:
            score = float(self.score)
            if not 0.0 <= score <= 1.0:  # also refuses NaN
                raise ValueError(f"Verdict.score must lie in [0, 1], got {self.score!r}")
            object.__setattr__(self, "score", score)

    @property
    def graded(self) -> bool:
        """True when ``score`` says more than ``valid`` does (a partial credit)."""
        return self.score != (1.0 if self.valid else 0.0)

    @property
    def reward(self) -> float:
        """R_acc: 1 for a valid solution, 0 otherwise."""
        return 1.0 if self.valid else 0.0

    def to_record(self, id: str) -> dict[str, Any]:
        record = {
            "id": id,
            "valid": self.valid,
            "optimal": self.optimal,
            "failure": self.failure,
            "failed_checks": list(self.failed_checks),
            "cost": self.cost,
        }
        if self.graded:  # a pass/fail task's verdict lines stay as they were
            record["score"] = self.score
        return record


@dataclass(frozen=True)
class Change:
    """One edit the projection made, or one part of a proposal it dropped."""

    field: str
    proposed: Any
    applied: Any
    reason: str


@dataclass(frozen=True)
class Projection:
    """A proposal merged onto the current config and projected onto the constraints."""

    config: BaseModel
    changes: tuple[Change, ...] = ()
    accepted: tuple[str, ...] = ()

    @property
    def modified(self) -> bool:
        return bool(self.changes)


@dataclass
class GenerationResult:
    """Records from a generator, and what it had to discard (the target is none)."""

    records: list[dict[str, Any]]
    discarded: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Grouping:
    """One way evaluation files a task's records: by a record field (e.g. map size).

    ``name`` keys the results (``summary.json``'s ``by.<name>``), ``title`` heads printed
    tables (default: the name), ``field`` is the record field read (default: the name),
    ``order`` fixes the display order of values (others follow as met), and ``label`` turns a
    field value into its group name (default ``str``; e.g. ``6`` -> ``"6x6"``). A record
    without the field is in no group of this grouping.
    """

    name: str
    title: str = ""
    field: str = ""
    order: tuple[str, ...] = ()
    label: Callable[[Any], str] | None = None

    def __post_init__(self) -> None:
        if not self.title:
            object.__setattr__(self, "title", self.name)
        if not self.field:
            object.__setattr__(self, "field", self.name)
        object.__setattr__(self, "order", tuple(str(v) for v in self.order))

    def value(self, record: Mapping[str, Any]) -> str | None:
        """The record's group in this grouping, or None when the record lacks the field."""
        if self.field not in record:
            return None
        raw = record[self.field]
        return self.label(raw) if self.label is not None else str(raw)


#: Rate attribute of :class:`~envengineer.components.metrics.Rates` (and key of its dict) per metric name.
METRIC_RATES: dict[str, str] = {"valid": "valid_rate", "optimal": "optimal_rate", "score": "mean_score"}


@dataclass(frozen=True)
class Aggregate:
    """A benchmark's headline number over its subsets: the per-subset rates added up
    (``how="sum"``, the MAPF paper's "Sum") or averaged (``"mean"``), per metric.

    Recorded in ``summary.json`` under ``key``; printed as ``title: valid 123.4, ...`` (percent).
    """

    key: str
    title: str
    how: str = "sum"
    metrics: tuple[str, ...] = ("valid", "optimal")

    def __post_init__(self) -> None:
        if self.how not in ("sum", "mean"):
            raise ValueError(f"Aggregate.how must be 'sum' or 'mean', got {self.how!r}")
        unknown = [m for m in self.metrics if m not in METRIC_RATES]
        if unknown:
            raise ValueError(f"Aggregate.metrics: unknown metric {unknown[0]!r} (known: {', '.join(METRIC_RATES)})")

    def compute(self, rates: Mapping[str, Any]) -> dict[str, float]:
        """``{metric: value}`` over ``rates`` (subset name -> Rates)."""
        values = list(rates.values())
        result = {}
        for metric in self.metrics:
            total = sum(getattr(r, METRIC_RATES[metric]) for r in values)
            result[metric] = round(total / len(values) if self.how == "mean" and values else total, 6)
        return result


@dataclass(frozen=True)
class Knob:
    """One numeric knob of a generator config, declared by the task (:attr:`Generator.knobs`).

    The baselines, the H context module and the default :meth:`Generator.project` read the
    declaration instead of guessing from names or shapes. A knob sits in every group of the
    config's knob table (:attr:`Generator.knob_table`), or at the config's top level when the
    task has no table.

    - ``low``/``high``: the bounds the projection keeps the knob in (a bound that depends on the
      task's options or the group, such as MAPF's hole ratio, is declared at its loosest; the
      task's own ``project()`` enforces the exact one);
    - ``step``: the smallest move the task distinguishes; values are kept on multiples of it
      (1 for integer knobs; 0.0001 for a ratio kept to four decimals);
    - ``harder``: which way makes instances harder (``up``, ``down`` or ``none``);
    - ``share``: the knob is a group's share of the training budget: the shares sum to 1;
    - ``practices``: failure types that more of this knob gives practice against (the heuristic
      raises it where those failures dominate a group's failures).
    """

    name: str
    low: float
    high: float
    step: float
    integer: bool = False
    harder: Literal["up", "down", "none"] = "none"
    share: bool = False
    practices: tuple[str, ...] = ()
    description: str = ""

    def __post_init__(self) -> None:
        if not (self.low <= self.high) or not self.step > 0:
            raise ValueError(f"knob {self.name!r}: needs low <= high and a positive step")
        if self.harder not in ("up", "down", "none"):
            raise ValueError(f"knob {self.name!r}: harder must be up, down or none, not {self.harder!r}")
        if self.integer and (self.share or any(float(v) != int(v) for v in (self.low, self.high, self.step))):
            raise ValueError(f"knob {self.name!r}: an integer knob has whole bounds and step, and is not a share")

    @property
    def easy_end(self) -> float | None:
        """The bound with the easiest instances (None: the knob is not a difficulty)."""
        return {"up": self.low, "down": self.high}.get(self.harder)

    @property
    def hard_end(self) -> float | None:
        """The bound with the hardest instances (None: the knob is not a difficulty)."""
        return {"up": self.high, "down": self.low}.get(self.harder)

    def snap(self, value: float) -> float | int:
        """``value`` clipped into the bounds and put on a multiple of the step (an int for integer knobs)."""
        value = min(self.high, max(self.low, float(value)))
        if self.integer:
            n = round((value - self.low) / self.step)
            result = int(self.low) + int(self.step) * n
            while result > self.high:
                result -= int(self.step)
            return max(int(self.low), result)
        result = _on_grid(self, value)
        if result > self.high:
            result = _on_grid(self, self.high - self.step / 2)
        if result < self.low:
            result = _on_grid(self, self.low + self.step / 2)
        return min(self.high, max(self.low, result))

    def shift(self, value: float, delta: float) -> float | int:
        """``value`` moved by ``delta`` in whole steps (at least one step when ``delta`` is not 0), within the bounds."""
        start = self.snap(value)
        target = self.snap(float(value) + delta)
        if delta and target == start:
            target = self.snap(start + math.copysign(self.step, delta))
        return target


# The knob's grid (:mod:`envengineer.components.knobs` keeps shares on it too).


def _decimals(step: float) -> int | None:
    """``d`` when ``step`` is 10**-d (0 <= d <= 12), else None."""
    for d in range(13):
        if abs(step - 10.0**-d) <= 1e-15:
            return d
    return None


def _on_grid(knob: Knob, value: float) -> float:
    d = _decimals(knob.step)
    if d is not None:
        return round(value, d)
    return round(knob.low + round((value - knob.low) / knob.step) * knob.step, 12)


def prompt_text(prompt: list[dict[str, str]] | str) -> str:
    """A rendered prompt as plain text: a string as it is; one chat message's content; several
    messages as ``role: content`` blocks."""
    if isinstance(prompt, str):
        return prompt
    messages = list(prompt)
    if len(messages) == 1:
        return str(messages[0].get("content", ""))
    return "\n\n".join(f"{m.get('role', '')}: {m.get('content', '')}" for m in messages)


@dataclass(frozen=True)
class Benchmark:
    """A frozen evaluation set shipped as a JSONL file with its sha256."""

    name: str
    task: str
    description: str
    path: Path
    sha256: str
    options: Mapping[str, Any] = field(default_factory=dict)
    subset_field: str | None = None  # shorthand for ``subsets=Grouping(subset_field)``
    build: Any = None  # callable returning list[dict]: rebuilds the set identically
    #: The set's subsets (a record field; evaluation files results under ``subsets.name`` too).
    subsets: Grouping | None = None
    #: A headline number over the subsets (e.g. the MAPF paper's "Sum"); None: none.
    aggregate: Aggregate | None = None
    #: A short name for tables and plot titles (e.g. ``3 agents``; default: the name).
    label: str = ""
    #: Where the set goes among the task's benchmarks in reports and comparisons (then by name).
    order: int = 0

    @property
    def display_label(self) -> str:
        return self.label or self.name

    def __post_init__(self) -> None:
        if self.subsets is None and self.subset_field:
            object.__setattr__(self, "subsets", Grouping(self.subset_field))
        elif self.subsets is not None and not self.subset_field:
            object.__setattr__(self, "subset_field", self.subsets.field)
