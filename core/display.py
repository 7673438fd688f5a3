"""Rich tables for results people look at."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import rich.console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from envengineer.components import Aggregate, Grouping
from envengineer.components.metrics import Rates, Summary


class Console(rich.console.Console):
    """rich's Console, reading the process environment as it is when it looks (``COLUMNS``, ``NO_COLOR``,
    ``TERM``). rich reads ``os.environ`` through a class attribute bound when rich is imported, so a
    library that replaces ``os.environ`` with a copy (datasets' multiprocessing does) would leave every
    console reading a stale one: a width set afterwards would be ignored. Nor is ``COLUMNS`` frozen when
    the console is made (rich fixes it then): a module-level console follows the value at print time."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if kwargs.get("width") is None:
            self._width = None
        if kwargs.get("height") is None:
            self._height = None

    @property  # type: ignore[override]
    def _environ(self) -> Mapping[str, str]:
        given = self.__dict__.get("_given_environ")
        return os.environ if given is None else given

    @_environ.setter
    def _environ(self, value: Mapping[str, str]) -> None:
        self.__dict__["_given_environ"] = value


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


# ------------------------------------------------------------------ a component's options


def type_text(annotation: Any) -> str:
    """An option's type as a person reads it: ``int``, ``str | None``, ``'full' | 'compact'``,
    ``dict[str, RampOptions]``."""
    import types
    import typing

    if annotation is type(None):
        return "None"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(type_text(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join('...' if a is Ellipsis else type_text(a) for a in args)}]" if args else name
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


#: A longer default (a whole prompt) is cut to this many characters in the options table.
DEFAULT_CHARS = 80


def default_text(field: Any) -> str:
    """An option's default as it would be written in YAML (flow style, on one line, cut at
    :data:`DEFAULT_CHARS`); ``required`` when it has none."""
    import yaml
    from pydantic import BaseModel

    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    try:
        text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10_000).strip()
    except yaml.YAMLError:
        return repr(value)
    text = " ".join(text.removesuffix("\n...").removesuffix("...").split())
    return text if len(text) <= DEFAULT_CHARS else text[: DEFAULT_CHARS - 1] + "…"


def options_tables(model: Any, title: str) -> list[Table]:
    """One table of ``model``'s fields (field, type, default, description), then one for each
    options model nested in a field's type (e.g. a per-knob mapping of options), each once."""
    import typing

    from pydantic import BaseModel

    tables: list[Table] = []
    todo: list[tuple[type[BaseModel], str]] = [(model, title)]
    seen: set[type] = set()
    while todo:
        current, heading = todo.pop(0)
        if current in seen:
            continue
        seen.add(current)
        table = Table(title=Text(heading), title_justify="left")
        table.add_column("field", style="bold", no_wrap=True)
        table.add_column("type")
        table.add_column("default")
        table.add_column("description")
        for name, field in current.model_fields.items():
            table.add_row(*(Text(cell) for cell in (name, type_text(field.annotation), default_text(field), field.description or "")))
            stack = [field.annotation]
            while stack:
                tp = stack.pop()
                if isinstance(tp, type) and issubclass(tp, BaseModel):
                    todo.append((tp, f"{tp.__name__} (in {name})"))
                stack.extend(typing.get_args(tp))
        tables.append(table)
    return tables
