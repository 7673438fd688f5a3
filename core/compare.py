"""Runs side by side, as the paper's results table.

One row per run (its run.yaml name and engineer); for each benchmark (3, 4, 5 agents)
the paper's "Sum" of per-subset rates (wr_025 + wr_050 + wr_075, out of 300) and the
overall rates, valid and optimal; then the validation rates of the last evaluated round.
Benchmark figures come from the last round that ran the benchmark (base if none did).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envengineer.errors import EnvEngineerError
from envengineer.runview import RunView, bench_label, load_run, rate, sort_bench_names, subset_sum

MISSING = "–"


@dataclass
class Column:
    key: str
    header: str  # "3 agents valid Σ"
    group: str  # "3 agents" (the markdown/rich header's first line)
    label: str  # "valid Σ"
    numeric: bool = True


@dataclass
class Comparison:
    columns: list[Column]
    rows: list[dict[str, Any]]  # column key -> value (float in percent, str, or None)


def _columns(benchmarks: Sequence[str]) -> list[Column]:
    columns = [Column("run", "run", "", "run", False), Column("engineer", "engineer", "", "engineer", False)]
    for bench in benchmarks:
        group = bench_label(bench)
        for metric in ("valid", "optimal"):
            columns.append(Column(f"{bench}:{metric}_sum", f"{group} {metric} Σ", group, f"{metric} Σ"))
        for metric in ("valid", "optimal"):
            columns.append(Column(f"{bench}:{metric}", f"{group} {metric} %", group, f"{metric} %"))
    columns.append(Column("val:valid", "validation valid %", "validation", "valid %"))
    columns.append(Column("val:optimal", "validation optimal %", "validation", "optimal %"))
    columns.append(Column("from", "from", "", "from", False))
    return columns


def _pct(value: float | None) -> float | None:
    return None if value is None else 100 * value


def compare_runs(runs: Sequence[RunView], benchmarks: Sequence[str] | None = None) -> Comparison:
    """The table for ``runs``; benchmarks default to every one any run has, by agent count."""
    if benchmarks is None:
        benchmarks = sort_bench_names({b for run in runs for b in run.bench_names()})
    rows = []
    for run in runs:
        row: dict[str, Any] = {"run": run.name, "engineer": run.engineer}
        sources: dict[str, list[str]] = {}
        for bench in benchmarks:
            stage = run.last_bench(bench)
            summary = stage.bench[bench] if stage else None
            for metric in ("valid", "optimal"):
                row[f"{bench}:{metric}_sum"] = subset_sum(summary, f"{metric}_rate")
                row[f"{bench}:{metric}"] = _pct(rate(summary, f"{metric}_rate"))
            if stage:
                sources.setdefault(stage.label, []).append(bench_label(bench).split()[0])
        val = run.last_eval()
        row["val:valid"] = _pct(rate(val.eval if val else None, "valid_rate"))
        row["val:optimal"] = _pct(rate(val.eval if val else None, "optimal_rate"))
        notes = []
        if len(sources) == 1:
            notes.append(f"bench: {next(iter(sources))}")
        else:
            notes.extend(f"bench {','.join(agents)}: {label}" for label, agents in sources.items())
        if val:
            notes.append(f"val: {val.label}")
        row["from"] = "; ".join(notes) or MISSING
        rows.append(row)
    return Comparison(_columns(benchmarks), rows)


def load_comparison(run_dirs: Sequence[str | Path]) -> Comparison:
    if not run_dirs:
        raise EnvEngineerError("compare: give at least one run directory")
    return compare_runs([load_run(d) for d in run_dirs])


def cell(value: Any, column: Column) -> str:
    """A value as shown on screen and in markdown: percents with one decimal, '–' when missing."""
    if value is None or value == "":
        return MISSING
    if column.numeric:
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
    note = (
        "\nΣ: the paper's Sum of per-subset rates (wr_025 + wr_050 + wr_075, out of 300); "
        "%: overall rate. Benchmarks from the last round that ran them (base if none did); "
        "validation from the last evaluated round.\n"
    )
    return "\n".join(lines) + "\n" + note


def to_csv(comparison: Comparison) -> str:
    """Machine-readable: full-precision percents, empty cells where a value is missing."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([c.header for c in comparison.columns])
    for row in comparison.rows:
        values = []
        for c in comparison.columns:
            value = row.get(c.key)
            values.append("" if value is None else (f"{value:.4f}" if c.numeric else value))
        writer.writerow(values)
    return buffer.getvalue()


def _pair(row: dict[str, Any], valid_key: str, optimal_key: str) -> str:
    valid, optimal = row.get(valid_key), row.get(optimal_key)
    if valid is None and optimal is None:
        return MISSING
    show = lambda v: MISSING if v is None else f"{v:.1f}"  # noqa: E731
    return f"{show(valid)} / {show(optimal)}"


def rich_tables(comparison: Comparison) -> list[Any]:
    """Two screen-sized tables, each cell "valid / optimal": the paper's Sums, then overall rates."""
    from rich.table import Table

    benchmarks = [c.key.split(":")[0] for c in comparison.columns if c.key.endswith(":valid_sum")]
    groups = {c.key.split(":")[0]: c.group for c in comparison.columns}
    sums = Table(title="paper table: Σ over subsets wr_025+wr_050+wr_075 (of 300), valid / optimal", title_justify="left")
    overall = Table(title="overall rates (%), valid / optimal", title_justify="left")
    for table in (sums, overall):
        table.add_column("run", style="bold")
        table.add_column("engineer")
        for bench in benchmarks:
            table.add_column(groups[bench], justify="right")
    sums.add_column("validation %", justify="right")
    overall.add_column("from", style="dim")
    for row in comparison.rows:
        head = [str(row["run"]), str(row["engineer"])]
        sums.add_row(*head, *(_pair(row, f"{b}:valid_sum", f"{b}:optimal_sum") for b in benchmarks), _pair(row, "val:valid", "val:optimal"))
        overall.add_row(*head, *(_pair(row, f"{b}:valid", f"{b}:optimal") for b in benchmarks), str(row.get("from") or MISSING))
    return [sums, overall]


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
