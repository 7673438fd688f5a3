"""Reports as a built-in plugin: ``envengineer report`` (a run's HTML page and plots, from its directory
alone) and ``envengineer compare`` (runs side by side)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape

from envengineer.display import Console
from envengineer.hookspecs import hookimpl

#: the command line's consoles (output read by tests through typer's runner: they write to the current sys.stdout)
console = Console()
err_console = Console(stderr=True)


def report(run_dir: Path = typer.Argument(..., help="run directory (finished or partial)")) -> None:
    """Write RUN_DIR/report.html and its plots (RUN_DIR/report/*.png): rates, failures, configs, curves, engineer notes."""
    from envengineer.plugins.report.page import write_report

    with console.status("rendering report"):
        result = write_report(run_dir)
    console.print(f"wrote [bold]{escape(str(result.html))}[/] and {len(result.images)} plots in [bold]{escape(str(result.html.parent / 'report'))}[/]", highlight=False, soft_wrap=True)
    for problem in result.problems:
        err_console.print(f"[yellow]skipped:[/] {escape(str(problem))}", highlight=False, soft_wrap=True)


def compare_command(
    run_dirs: list[Path] = typer.Argument(..., help="run directories to put side by side"),
    output: Optional[Path] = typer.Option(None, "--output", help="also write the table to FILE.md or FILE.csv"),
) -> None:
    """Runs side by side: each benchmark's declared aggregate over its subsets (mapf-frozenlake: the paper's Sum) and overall rates, then validation."""
    from envengineer.plugins.report.compare import load_comparison, rich_tables, write_comparison

    comparison = load_comparison(run_dirs)
    for table in rich_tables(comparison):
        console.print(table)
    if output is not None:
        console.print(f"wrote [bold]{escape(str(write_comparison(comparison, output)))}[/]", highlight=False, soft_wrap=True)


@hookimpl
def register_commands(cli: Any) -> None:
    cli.command()(report)
    cli.command("compare")(compare_command)  # not named compare: the submodule of that name would replace it
