"""Suites as a built-in plugin: ``envengineer suite`` runs configs or a manifest's arms over seeds (locally in
parallel, or as jobs on a Ray or Slurm cluster) and writes the tables, paired tests and plots
(docs/paper-suite.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape

from envengineer.api import CommandState
from envengineer.errors import EnvEngineerError
from envengineer.hookspecs import hookimpl


def suite_command(
    state: CommandState,
    sources: list[Path] = typer.Argument(..., help="folders of run configs (every *.yaml directly in them; a folder with suite.yaml: its arms), manifests and/or config files"),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="N: seeds 0..N-1; A-B: seeds A..B; a,b,c: those (each overrides the config's seed); "
                                          "default: a manifest's seeds:, else 3"),
    output: Path = typer.Option(Path("runs/suite"), "--output", help="suite folder: <config-stem or arm>/seed-<s>/ run directories and the tables"),
    only: Optional[str] = typer.Option(None, "--only", help="only configs whose file stem, arm or run name matches this glob, e.g. 'v*'"),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="--launcher local: runs at a time, each in its own process (1: one after the other, in this process)"),
    launcher: Optional[str] = typer.Option(None, "--launcher", help="local (this machine), ray (a Ray cluster) or slurm (through submitit); default: the manifest's launcher.name, else local"),
    address: Optional[str] = typer.Option(None, "--address", help="ray: the cluster's address (e.g. head:6379); default: the one on this machine, else a new local one"),
    slurm_partition: Optional[str] = typer.Option(None, "--slurm-partition", help="slurm: the partition"),
    slurm_time: Optional[int] = typer.Option(None, "--slurm-time", min=1, help="slurm: each run's time limit in minutes"),
    slurm_account: Optional[str] = typer.Option(None, "--slurm-account", help="slurm: the account charged"),
    slurm_array: Optional[bool] = typer.Option(None, "--slurm-array/--slurm-jobs", help="slurm: the runs as job arrays, or one job per run"),
    slurm_executor: Optional[str] = typer.Option(None, "--slurm-executor", help="slurm: slurm, or local to run the same jobs on this machine through submitit"),
    launcher_file: Optional[Path] = typer.Option(None, "--launcher-file", help="a YAML file of launcher settings (a manifest's launcher: section: partition, time, setup, sbatch, ...), in place of the manifest's"),
    status: bool = typer.Option(False, "--status", help="print each run's state (pending, running on which node, round k of n, done, failed); submit nothing"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print which runs are finished, partial or to do; run nothing"),
    tables_only: bool = typer.Option(False, "--tables-only", help="write the tables and plots from what is on disk; run nothing"),
) -> None:
    """Run configs or a manifest's arms over seeds (resumable; --jobs N in parallel, or as jobs on a Ray or
    Slurm cluster), then write the tables (mean ± sd) as .md and .csv, and each table's arms in detail: per
    subset, paired tests against the baseline arm, plots."""
    from envengineer.plugins.suite.launch.base import suite_launcher
    from envengineer.plugins.suite.tables import execute, plan, plan_table, write_tables

    registry, console = state.registry, state.console
    suite = plan(sources, seeds=seeds, output=output, only=only, registry=registry)
    options = suite_launcher(suite.entries, launcher_file, {
        "name": launcher, "address": address, "partition": slurm_partition, "time": slurm_time, "account": slurm_account,
        "array": slurm_array, "executor": slurm_executor})
    if jobs > 1 and options.name != "local":
        raise EnvEngineerError(f"--jobs {jobs}: for --launcher local; on {options.name} every run is its own job")
    if status:
        from envengineer.plugins.suite.launch.jobs import print_status

        print_status(suite, options, console)
        return
    if dry_run:
        console.print(plan_table(suite))
        return
    if not tables_only:
        execute(suite, registry=registry, console=console, jobs=jobs, launcher=options)
    written = write_tables(suite, console=console, registry=registry)
    pages = [p for p in written if p.suffix == ".md"]
    console.print(f"wrote {', '.join(escape(str(p)) for p in pages)} (and {len(written) - len(pages)} .csv and .png files beside them)",
                  highlight=False, soft_wrap=True)
    failed = suite.failed()
    if failed and not tables_only:
        for run in failed:
            state.err_console.print(f"[bold red]failed:[/] {escape(str(run.run_dir))}: {escape(str(run.error))}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)


@hookimpl
def register_commands(cli: Any, state: CommandState) -> dict[str, str]:
    cli.command("suite")(state.command(suite_command))
    return {"suite": "compare"}
