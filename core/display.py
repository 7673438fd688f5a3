"""Rich tables for results people look at."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from envengineer.metrics import Rates, Summary


def _pct(rate: float) -> str:
    return f"{100 * rate:.1f}%"


def rates_table(summary: Summary, dimension: str | None, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column(dimension or "", style="bold")
    table.add_column("n", justify="right")
    table.add_column("valid", justify="right")
    table.add_column("optimal", justify="right")
    table.add_column("± (valid)", justify="right", style="dim")
    rows: list[tuple[str, Rates]] = list(summary.by.get(dimension, {}).items()) if dimension else []
    for key, rates in rows:
        table.add_row(key, str(rates.n), _pct(rates.valid_rate), _pct(rates.optimal_rate), _pct(Rates.stderr(rates.valid_rate, rates.n)))
    o = summary.overall
    table.add_row("all", str(o.n), _pct(o.valid_rate), _pct(o.optimal_rate), _pct(Rates.stderr(o.valid_rate, o.n)), style="bold")
    return table


def failures_table(summary: Summary, failure_types: Sequence[str], title: str = "failures") -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("failure type", style="bold")
    table.add_column("count", justify="right")
    table.add_column("share", justify="right")
    total = summary.overall.n or 1
    known = list(failure_types) + sorted(set(summary.overall.failures) - set(failure_types))
    for name in known:
        count = summary.overall.failures.get(name, 0)
        table.add_row(name, str(count), _pct(count / total))
    return table


def print_summary(summary: Summary, failure_types: Sequence[str], *, dimensions: Sequence[str], console: Console | None = None, title: str = "") -> None:
    console = console or Console()
    for dimension in dimensions:
        if summary.by.get(dimension):
            console.print(rates_table(summary, dimension, f"{title} by {dimension}".strip()))
    if not dimensions or not any(summary.by.get(d) for d in dimensions):
        console.print(rates_table(summary, None, title or "results"))
    console.print(failures_table(summary, failure_types))
