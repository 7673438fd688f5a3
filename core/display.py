"""Rich tables for results people look at."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
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


def _bars(console: Console, transient: bool) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=transient,
    )


def progress_bar(description: str, total: int | None, *, console: Console, transient: bool = False) -> tuple[Progress, Callable[..., None]]:
    """A progress bar (use it as a context manager) and its ``advance(n=1)`` callback."""
    bars = _bars(console, transient)
    task = bars.add_task(description, total=total)
    return bars, (lambda n=1: bars.advance(task, n))


@contextmanager
def stage_progress(console: Console, *, transient: bool = True) -> Iterator[Callable[[str, int, int], None]]:
    """One bar per stage for callbacks of the form ``progress(stage, done, total)``."""
    bars = _bars(console, transient)
    tasks: dict[str, Any] = {}

    def progress(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = bars.add_task(stage, total=total)
        bars.update(tasks[stage], completed=done, total=total)

    with bars:
        yield progress
