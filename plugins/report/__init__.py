"""Reports as a built-in plugin: ``envengineer report`` (a run's HTML page and plots, from its directory
alone) and ``envengineer compare`` (runs side by side)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape

from envengineer.api import CommandState
from envengineer.hookspecs import hookimpl


def report(state: CommandState, run_dir: Path = typer.Argument(..., help="run directory (finished or partial)")) -> None:
    """Write RUN_DIR/report.html and its plots (RUN_DIR/report/*.png): rates, failures, configs, curves, engineer notes."""
    from envengineer.plugins.report.page import write_report

    console = state.console
    with console.status("rendering report"):
        result = write_report(run_dir, state.registry)
    console.print(f"wrote [bold]{escape(str(result.html))}[/] and {len(result.images)} plots in [bold]{escape(str(result.html.parent / 'report'))}[/]", highlight=False, soft_wrap=True)
    for problem in result.problems:
        state.err_console.print(f"[yellow]skipped:[/] {escape(str(problem))}", highlight=False, soft_wrap=True)


def compare_command(
    state: CommandState,
    run_dirs: list[Path] = typer.Argument(..., help="run directories to put side by side"),
    output: Optional[Path] = typer.Option(None, "--output", help="also write the table to FILE.md or FILE.csv"),
) -> None:
    """Runs side by side: each benchmark's declared aggregate over its subsets (mapf-frozenlake: the paper's Sum) and overall rates, then validation."""
    from envengineer.plugins.report.compare import load_comparison, rich_tables, write_comparison

    comparison = load_comparison(run_dirs, state.registry)
    for table in rich_tables(comparison):
        state.console.print(table)
    if output is not None:
        state.console.print(f"wrote [bold]{escape(str(write_comparison(comparison, output)))}[/]", highlight=False, soft_wrap=True)


@hookimpl
def register_commands(cli: Any, state: CommandState) -> dict[str, str]:
    cli.command()(state.command(report))
    cli.command("compare")(state.command(compare_command))  # not named compare: the submodule of that name would replace it
    return {"report": "eval", "compare": "report"}
