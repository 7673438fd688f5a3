"""What a run's task and benchmarks declare, as the readers of a run directory draw it (the declarations
themselves are in :mod:`envengineer.components.declarations`).

The report, ``compare`` and ``suite`` know no task: they show the groupings, knobs, benchmark
labels, subsets and aggregates that the run's task family declares (resolved through the
registry from run.yaml's ``task`` section; see :func:`envengineer.plugins.report.view.load_run_view`).
When the family is not installed they show what the recorded files hold: every ``by`` key of the
summaries as a grouping, the knob table found in the round configs, no subsets or aggregate.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envengineer.components import METRIC_RATES, Aggregate, Benchmark, Grouping

#: Top-level sections of a Summary.to_dict() that are no aggregate.
SUMMARY_SECTIONS = ("overall", "by", "settings", "calls")


# ------------------------------------------------------------------ orderings


def _natural(key: str) -> tuple[Any, ...]:
    match = re.fullmatch(r"(\d+)x(\d+)", key)
    if match:
        return (0, int(match[1]), int(match[2]), key)
    try:
        return (0, float(key), 0, key)
    except ValueError:
        return (1, 0, 0, key)


def sort_keys(keys: Iterable[Any]) -> list[str]:
    """Group values in a readable order: ``3x3 < 10x10``, ``0.1 < 0.2``, then text."""
    return sorted({str(k) for k in keys}, key=_natural)


# ------------------------------------------------------------------ groupings


@dataclass(frozen=True)
class Dimension:
    """A grouping as a reader shows it: the rates under ``summary["by"][name]``, headed ``title``."""

    name: str
    title: str
    order: tuple[str, ...] = ()

    @classmethod
    def of(cls, grouping: Grouping) -> Dimension:
        return cls(grouping.name, grouping.title, tuple(grouping.order))

    def keys(self, present: Iterable[Any]) -> list[str]:
        """The groups present, the declared order first, then the others in :func:`sort_keys` order."""
        found = {str(k) for k in present}
        return [k for k in self.order if k in found] + sort_keys(found - set(self.order))


def by_keys(summaries: Iterable[Mapping[str, Any] | None]) -> list[str]:
    """Every ``by`` key of the summaries, in the order first met."""
    keys: dict[str, None] = {}
    for summary in summaries:
        by = summary.get("by") if isinstance(summary, Mapping) else None
        if isinstance(by, Mapping):
            keys.update((str(k), None) for k, v in by.items() if isinstance(v, Mapping))
    return list(keys)


def dimensions(generator: Any, summaries: Sequence[Mapping[str, Any] | None], extra: Sequence[Grouping] = ()) -> list[Dimension]:
    """The groupings to show for ``summaries``: the task's declared ones (all of them, the primary
    first), then ``extra`` (the evaluation set's subsets), then any other ``by`` key the files hold
    (titled by its name). Without a task (``generator`` None): the files' ``by`` keys."""
    declared: list[Dimension] = []
    if generator is not None:
        declared = [Dimension.of(g) for g in generator.evaluation_groupings()]
    declared += [Dimension.of(g) for g in extra if g.name not in {d.name for d in declared}]
    names = {d.name for d in declared}
    return declared + [Dimension(k, k) for k in by_keys(summaries) if k not in names]


# ------------------------------------------------------------------ benchmarks


@dataclass(frozen=True)
class BenchView:
    """A benchmark as tables show it: its label and place, its subsets and its aggregate."""

    name: str
    label: str
    order: int = 0
    subsets: Dimension | None = None
    aggregate: Aggregate | None = None
    declared: bool = False  # False: the benchmark is not registered here (its plugin is missing)

    @classmethod
    def of(cls, name: str, spec: Benchmark | None) -> BenchView:
        if spec is None:
            return cls(name, name)
        subsets = Dimension.of(spec.subsets) if spec.subsets is not None else None
        return cls(name, spec.display_label, spec.order, subsets, spec.aggregate if subsets is not None else None, True)

    @property
    def sort_key(self) -> tuple[Any, ...]:
        return (not self.declared, self.order, self.name)

    @property
    def symbol(self) -> str:
        """The aggregate's column mark: ``Σ`` for a sum, ``mean`` for a mean ("" without one)."""
        if self.aggregate is None:
            return ""
        return "Σ" if self.aggregate.how == "sum" else "mean"

    def out_of(self, summary: Mapping[str, Any] | None = None) -> int | None:
        """The aggregate's top value in percent: 100 × the number of subsets for a sum (those the
        benchmark declares, else those ``summary`` holds), 100 for a mean; None when unknown."""
        if self.aggregate is None:
            return None
        if self.aggregate.how == "mean":
            return 100
        count = len(self.subsets.order) if self.subsets is not None and self.subsets.order else len(self.subset_keys([summary]))
        return 100 * count if count else None

    def subset_keys(self, summaries: Iterable[Mapping[str, Any] | None]) -> list[str]:
        """The subsets present in the summaries (declared ones in their order)."""
        if self.subsets is None:
            return []
        present: set[str] = set()
        for summary in summaries:
            node = ((summary or {}).get("by") or {}).get(self.subsets.name) if isinstance(summary, Mapping) else None
            if isinstance(node, Mapping):
                present |= {str(k) for k in node}
        return self.subsets.keys(present)

    def figure(self, summary: Mapping[str, Any] | None, metric: str) -> float | None:
        """The aggregate of ``metric`` (``valid``, ``optimal``, ``score``) in percent: as the
        evaluation recorded it (``summary[aggregate.key]``), else computed from the per-subset
        rates, and then only when every declared subset is present (a partial sum never passes
        for a full one). None without an aggregate or the figures."""
        if self.aggregate is None or self.subsets is None or not isinstance(summary, Mapping):
            return None
        recorded = summary.get(self.aggregate.key)
        value = recorded.get(metric) if isinstance(recorded, Mapping) else None
        if _is_number(value):
            return 100 * float(value)
        if metric not in self.aggregate.metrics or metric not in METRIC_RATES:
            return None
        node = (summary.get("by") or {}).get(self.subsets.name) if isinstance(summary.get("by"), Mapping) else None
        if not isinstance(node, Mapping):
            return None
        keys = list(self.subsets.order) or list(node)
        values = [(node.get(k) or {}).get(METRIC_RATES[metric]) if isinstance(node.get(k), Mapping) else None for k in keys]
        if not values or not all(_is_number(v) for v in values):
            return None
        total = sum(100 * float(v) for v in values)  # type: ignore[arg-type]
        return total / len(values) if self.aggregate.how == "mean" else total

    def note(self) -> str:
        """``Σ: Sum over subsets, the per-subset rates added up in percent (out of 300)``."""
        if self.aggregate is None:
            return ""
        how = "added up" if self.aggregate.how == "sum" else "averaged"
        out_of = self.out_of()
        top = f" (out of {out_of})" if out_of is not None else ""
        return f"{self.symbol}: {self.aggregate.title}, the per-subset rates {how} in percent{top}"


def aggregate_notes(views: Iterable[BenchView]) -> str:
    """One note per distinct aggregate (``Σ: Sum over subsets, ... (out of 300)``), joined by ``; ``."""
    return "; ".join(dict.fromkeys(n for v in views if (n := v.note())))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


# ------------------------------------------------------------------ knobs


@dataclass(frozen=True)
class KnobLayout:
    """Where a generator config keeps its knobs: a per-group table (``table``) or the top level."""

    knobs: tuple[str, ...]
    table: str | None = None
    groups: tuple[str, ...] = ()  # preferred order of the table's groups
    declared: bool = True
    ROW = "config"  # the single row of a config whose knobs sit at its top level

    def values(self, config: Mapping[str, Any] | None) -> dict[str, dict[str, Any]] | None:
        """``{group: {knob: value}}`` of ``config`` (one row, :attr:`ROW`, for top-level knobs);
        None when the config does not hold the layout."""
        if not isinstance(config, Mapping):
            return None
        if self.table is None:
            found = {k: config[k] for k in self.knobs if k in config}
            return {self.ROW: found} if found else None
        groups = config.get(self.table)
        if not isinstance(groups, Mapping):
            return None
        return {str(g): {k: v[k] for k in self.knobs if k in v} for g, v in groups.items() if isinstance(v, Mapping)}

    def group_keys(self, present: Iterable[str]) -> list[str]:
        return Dimension("", "", self.groups).keys(present)


def knob_layout(generator: Any, configs: Sequence[Mapping[str, Any] | None]) -> KnobLayout | None:
    """The declared knob table and knobs; without a declaration (task not installed, or a task
    that declares no knobs), the first field of the configs that maps groups to numbers, else
    their numeric top-level fields. None when the configs hold no numeric knob."""
    if generator is not None and generator.knobs:
        groups = tuple(generator.groups()) if generator.knob_table is not None else ()
        return KnobLayout(tuple(k.name for k in generator.knobs), generator.knob_table, groups)
    configs = [c for c in configs if isinstance(c, Mapping)]
    for field_name in dict.fromkeys(k for c in configs for k in c):
        tables = [c.get(field_name) for c in configs if field_name in c]
        if tables and all(isinstance(t, Mapping) and t and all(isinstance(v, Mapping) for v in t.values()) for t in tables):
            knobs = dict.fromkeys(k for t in tables for v in t.values() for k, x in v.items() if _is_number(x))
            if knobs:
                return KnobLayout(tuple(knobs), str(field_name), declared=False)
    top = dict.fromkeys(k for c in configs for k, v in c.items() if _is_number(v))
    return KnobLayout(tuple(top), None, declared=False) if top else None
