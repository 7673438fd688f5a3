"""Rich tables for results people look at."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from envengineer.components import Aggregate, Grouping
from envengineer.metrics import Rates, Summary


def _pct(rate: float) -> str:
    return f"{100 * rate:.1f}%"


def _dimension(dimension: str | Grouping | None) -> tuple[str | None, str]:
    """(results key, printed title) of a grouping or a bare dimension name."""
    if isinstance(dimension, Grouping):
        return dimension.name, dimension.title
    return dimension, dimension or ""


def rates_table(summary: Summary, dimension: str | Grouping | None, title: str) -> Table:
    """Rates per group of one grouping (its title heads the first column), then overall. A
    mean-score column appears when some verdict carries a graded score (never for a pass/fail task)."""
    key, heading = _dimension(dimension)
    graded = summary.overall.graded > 0
    table = Table(title=title, title_justify="left")
    table.add_column(heading, style="bold")
    table.add_column("n", justify="right")
    table.add_column("valid", justify="right")
    table.add_column("optimal", justify="right")
    if graded:
        table.add_column("score", justify="right")
    table.add_column("± (valid)", justify="right", style="dim")

    def cells(rates: Rates) -> list[str]:
        score = [f"{rates.mean_score:.3f}"] if graded else []
        return [str(rates.n), _pct(rates.valid_rate), _pct(rates.optimal_rate), *score, _pct(Rates.stderr(rates.valid_rate, rates.n))]

    rows: list[tuple[str, Rates]] = list(summary.by.get(key, {}).items()) if key else []
    for group, rates in rows:
        table.add_row(group, *cells(rates))
    table.add_row("all", *cells(summary.overall), style="bold")
    return table


def aggregate_line(aggregate: Aggregate, values: dict[str, float]) -> str:
    """A benchmark's aggregate as printed: ``Sum over subsets: valid 123.4, optimal 56.7``."""
    return f"{aggregate.title}: " + ", ".join(f"{metric} {100 * value:.1f}" for metric, value in values.items())


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


def print_summary(
    summary: Summary,
    failure_types: Sequence[str],
    *,
    dimensions: Sequence[str | Grouping],
    console: Console | None = None,
    title: str = "",
) -> None:
    """One rates table per grouping that has rows (titled by the grouping's title), then the failures."""
    console = console or Console()
    shown = False
    for dimension in dimensions:
        key, heading = _dimension(dimension)
        if summary.by.get(key):
            console.print(rates_table(summary, dimension, f"{title} by {heading}".strip()))
            shown = True
    if not shown:
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
