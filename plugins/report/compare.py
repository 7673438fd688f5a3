"""Runs side by side, as a results table.

One row per run (its run.yaml name and engineer); for each benchmark, in the order its task
declares and under its declared label, the benchmark's declared aggregate over its subsets
(e.g. MAPF's "Sum over subsets", as the evaluation recorded it) and the overall rates, valid
and optimal; then the validation rates of the last evaluated round. Benchmark figures come
from the last round that ran the benchmark (base if none did). ``envengineer suite`` builds
its mean ± sd tables from the same pieces (:class:`Stat`).
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envengineer.errors import EnvEngineerError
from envengineer.plugins.report.drawn import BenchView, aggregate_notes
from envengineer.plugins.report.view import BASE, RunView, Stage, load_run_view, rate, sort_benches

MISSING = "–"


@dataclass
class Column:
    key: str
    header: str  # "3 agents valid Σ"
    group: str  # "3 agents" (the markdown/rich header's first line)
    label: str  # "valid Σ"
    numeric: bool = True


@dataclass(frozen=True)
class Stat:
    """A figure over repeated runs (seeds): mean and sample standard deviation (n − 1)."""

    mean: float
    sd: float | None  # None with a single value: a spread of one run is not zero, it is unknown
    n: int

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Stat | None:
        present = [float(v) for v in values if v is not None]
        if not present:
            return None
        sd = statistics.stdev(present) if len(present) > 1 else None
        return cls(statistics.fmean(present), sd, len(present))

    def __str__(self) -> str:
        return f"{self.mean:.1f}" if self.sd is None else f"{self.mean:.1f} ± {self.sd:.1f}"


@dataclass
class Comparison:
    columns: list[Column]
    rows: list[dict[str, Any]]  # column key -> value (float in percent, Stat, str, or None)
    note: str = ""
    over_seeds: bool = False  # numeric cells are Stat: the CSV always has their sd and n columns


SOURCES_NOTE = "Benchmarks from the last round that ran them (base if none did); validation from the last evaluated round."


def comparison_note(views: Sequence[BenchView], tail: str = SOURCES_NOTE) -> str:
    """The note under a table: each benchmark aggregate's meaning and top, what % is, where figures come from."""
    notes = aggregate_notes(views)
    return (f"{notes}; " if notes else "") + f"%: overall rate. {tail}"


def metric_columns(benchmarks: Sequence[BenchView], labels: dict[str, str] | None = None) -> list[Column]:
    """Per benchmark: valid/optimal aggregate (when it declares one: ``Σ`` for a sum) and overall %;
    then validation (keys as in :func:`run_figures`). Headers use the benchmark's label unless
    ``labels`` names it otherwise."""
    columns = []
    for view in benchmarks:
        bench = view.name
        group = (labels or {}).get(bench) or view.label
        if view.aggregate is not None:
            for metric in ("valid", "optimal"):
                columns.append(Column(f"{bench}:{metric}_agg", f"{group} {metric} {view.symbol}", group, f"{metric} {view.symbol}"))
        for metric in ("valid", "optimal"):
            columns.append(Column(f"{bench}:{metric}", f"{group} {metric} %", group, f"{metric} %"))
    columns.append(Column("val:valid", "validation valid %", "validation", "valid %"))
    columns.append(Column("val:optimal", "validation optimal %", "validation", "optimal %"))
    return columns


def _columns(benchmarks: Sequence[BenchView]) -> list[Column]:
    head = [Column("run", "run", "", "run", False), Column("engineer", "engineer", "", "engineer", False)]
    return [*head, *metric_columns(benchmarks), Column("from", "from", "", "from", False)]


def percent(value: float | None) -> float | None:
    """A rate in percent (None stays None)."""
    return None if value is None else 100 * value


def bench_views(runs: Sequence[RunView], names: Sequence[str] | None = None) -> list[BenchView]:
    """The benchmarks of ``runs`` (default: every one any run has), as the first run that knows
    each declares it, in declared order."""
    if names is None:
        names = list({b for run in runs for b in run.bench_names()})
    views = {}
    for name in names:
        seen = [run.bench(name) for run in runs]
        views[name] = next((v for v in seen if v.declared), seen[0] if seen else BenchView(name, name))
    return [views[n] for n in sort_benches(views.values())]


def engineer_label(config: dict[str, Any]) -> str:
    """A run config's engineer as RunView.engineer shows it (``openai:gpt-5``)."""
    return RunView(Path("."), config, [], Stage(BASE, None), []).engineer


def run_figures(run: RunView, benchmarks: Sequence[BenchView]) -> tuple[dict[str, float | None], dict[str, list[str]], Any]:
    """A run's figures (percent) keyed as :func:`metric_columns`, which stage each benchmark came
    from (label -> benchmarks), and the stage the validation figures came from."""
    figures: dict[str, float | None] = {}
    sources: dict[str, list[str]] = {}
    for view in benchmarks:
        bench = view.name
        stage = run.last_bench(bench)
        summary = stage.bench[bench] if stage else None
        for metric in ("valid", "optimal"):
            if view.aggregate is not None:
                figures[f"{bench}:{metric}_agg"] = view.figure(summary, metric)
            figures[f"{bench}:{metric}"] = percent(rate(summary, f"{metric}_rate"))
        if stage:
            sources.setdefault(stage.label, []).append(bench)
    val = run.last_eval()
    figures["val:valid"] = percent(rate(val.eval if val else None, "valid_rate"))
    figures["val:optimal"] = percent(rate(val.eval if val else None, "optimal_rate"))
    return figures, sources, val


def compare_runs(runs: Sequence[RunView], benchmarks: Sequence[str] | None = None) -> Comparison:
    """The table for ``runs``; benchmarks default to every one any run has, in declared order."""
    views = bench_views(runs, benchmarks)
    labels = {v.name: v.label for v in views}
    rows = []
    for run in runs:
        figures, sources, val = run_figures(run, views)
        row: dict[str, Any] = {"run": run.name, "engineer": run.engineer, **figures}
        notes = []
        if len(sources) == 1:
            notes.append(f"bench: {next(iter(sources))}")
        else:
            notes.extend(f"bench {','.join(labels[b].split()[0] for b in names)}: {label}" for label, names in sources.items())
        if val:
            notes.append(f"val: {val.label}")
        row["from"] = "; ".join(notes) or MISSING
        rows.append(row)
    return Comparison(_columns(views), rows, comparison_note(views))


def load_comparison(run_dirs: Sequence[str | Path], registry: Any) -> Comparison:
    """The table of the runs in ``run_dirs`` (``registry``: resolves their tasks)."""
    if not run_dirs:
        raise EnvEngineerError("compare: give at least one run directory")
    return compare_runs([load_run_view(d, registry) for d in run_dirs])


def cell(value: Any, column: Column) -> str:
    """A value as shown on screen and in markdown: percents with one decimal (``mean ± sd``
    over seeds), '–' when missing."""
    if value is None or value == "":
        return MISSING
    if column.numeric and not isinstance(value, Stat):
        return f"{value:.1f}"
    return str(value)


def to_markdown(comparison: Comparison) -> str:
    cols = comparison.columns
    lines = [
        "| " + " | ".join(c.header for c in cols) + " |",
        "|" + "|".join("---:" if c.numeric else "---" for c in cols) + "|",
    ]
    for row in comparison.rows:
        lines.append("| " + " | ".join(cell(row.get(c.key), c).replace("|", "\\|") for c in cols) + " |")
    return "\n".join(lines) + "\n\n" + comparison.note + "\n"


def _spread_columns(comparison: Comparison) -> set[str]:
    if comparison.over_seeds:
        return {c.key for c in comparison.columns if c.numeric}
    return {c.key for c in comparison.columns if any(isinstance(row.get(c.key), Stat) for row in comparison.rows)}


def to_csv(comparison: Comparison) -> str:
    """Machine-readable: full-precision percents, empty cells where a value is missing.
    A column of means over seeds is followed by its ``sd`` and ``n`` columns."""
    spread = _spread_columns(comparison)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    header = []
    for c in comparison.columns:
        header.append(c.header)
        if c.key in spread:
            header += [f"{c.header} sd", f"{c.header} n"]
    writer.writerow(header)
    number = lambda v: "" if v is None else f"{v:.4f}"  # noqa: E731
    for row in comparison.rows:
        values = []
        for c in comparison.columns:
            value = row.get(c.key)
            if c.key in spread:
                stat = value if isinstance(value, Stat) else None
                values += [number(stat.mean if stat else None), number(stat.sd if stat else None), str(stat.n) if stat else "0"]
            elif c.numeric:
                values.append(number(value))
            else:
                values.append("" if value is None else str(value))
        writer.writerow(values)
    return buffer.getvalue()


def _pair(row: dict[str, Any], valid_key: str, optimal_key: str) -> str:
    valid, optimal = row.get(valid_key), row.get(optimal_key)
    if valid is None and optimal is None:
        return MISSING
    show = lambda v: MISSING if v is None else str(v) if isinstance(v, Stat) else f"{v:.1f}"  # noqa: E731
    return f"{show(valid)} / {show(optimal)}"


def rich_tables(comparison: Comparison, title: str = "comparison") -> list[Any]:
    """Screen-sized tables, each cell "valid / optimal": the benchmarks' aggregates over their
    subsets (with validation), when any declares one, then overall rates. The leading text columns
    head both; the trailing ones go to the last."""
    from rich.table import Table

    benchmarks = list(dict.fromkeys(c.key.split(":")[0] for c in comparison.columns if c.key.endswith(":valid") and not c.key.startswith("val:")))
    aggregated = [b for b in benchmarks if any(c.key == f"{b}:valid_agg" for c in comparison.columns)]
    marks = {c.label.split()[-1] for c in comparison.columns if c.key.endswith(":valid_agg")}
    groups = {c.key.split(":")[0]: c.group for c in comparison.columns}
    first_numeric = next((i for i, c in enumerate(comparison.columns) if c.numeric), len(comparison.columns))
    last_numeric = max((i for i, c in enumerate(comparison.columns) if c.numeric), default=first_numeric - 1)
    head = comparison.columns[:first_numeric]
    tail = comparison.columns[last_numeric + 1 :]
    mark = next(iter(marks)) if len(marks) == 1 else "aggregate"
    sums = Table(title=f"{title}: {mark} over subsets, valid / optimal", title_justify="left") if aggregated else None
    overall = Table(title=f"{title}: overall rates (%), valid / optimal", title_justify="left")
    for table, shown in ((sums, aggregated), (overall, benchmarks)):
        if table is None:
            continue
        for i, column in enumerate(head):
            table.add_column(column.header, style="bold" if i == 0 else None)
        for bench in shown:
            table.add_column(groups[bench], justify="right")
    (sums or overall).add_column("validation %", justify="right")
    for column in tail:
        overall.add_column(column.header, style="dim")
    for row in comparison.rows:
        first = [cell(row.get(c.key), c) for c in head]
        validation = [_pair(row, "val:valid", "val:optimal")]
        if sums is not None:
            sums.add_row(*first, *(_pair(row, f"{b}:valid_agg", f"{b}:optimal_agg") for b in aggregated), *validation)
        overall.add_row(*first, *(_pair(row, f"{b}:valid", f"{b}:optimal") for b in benchmarks),
                        *([] if sums is not None else validation), *(cell(row.get(c.key), c) for c in tail))
    return [t for t in (sums, overall) if t is not None]


def write_comparison(comparison: Comparison, output: str | Path) -> Path:
    """Write ``.md`` or ``.csv`` (chosen by suffix) atomically."""
    from envengineer.fileio import write_text

    path = Path(output)
    suffix = path.suffix.lower()
    if suffix in (".md", ".markdown"):
        write_text(path, to_markdown(comparison))
    elif suffix == ".csv":
        write_text(path, to_csv(comparison))
    else:
        raise EnvEngineerError(f"--output {output}: expected a .md or .csv file")
    return path
