"""GPU planning as a built-in plugin: ``envengineer doctor`` (what this machine offers a GPU run: the
loop's preflight checks, :mod:`envengineer.loop.preflight`, printed) and ``envengineer plan`` (a run's GPU
memory per phase, :mod:`~envengineer.plugins.gpu.plan`), and the memory plan ``run --dry-run`` prints."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape

from envengineer.api import CommandState
from envengineer.errors import EnvEngineerError
from envengineer.hookspecs import hookimpl


def doctor(
    state: CommandState,
    config: Optional[Path] = typer.Argument(None, help="a run config: check what its trainer and policy need (default: everything the plugins check)"),
    overrides: Optional[list[str]] = typer.Argument(None, help="dotted overrides KEY.SUB=VALUE, as for run", show_default=False),
    lock: Optional[Path] = typer.Option(None, "--lock", help="the tested set of versions to compare this environment with "
                                        "(default: the checkout's requirements/lock.txt)"),
) -> None:
    """What this machine and environment offer a GPU run, and what will not work (ok / warn / missing, with fixes).

    Without CONFIG it also compares the installed packages with the lock, the versions the tests ran on: each
    package at another version, missing, or outside the tested set, with the command that fixes it.

    Exits 1 when CONFIG's run would stop before it starts (its model folder missing or incomplete) or when it needs
    a GPU and something it needs is missing (as `run` would stop); a machine without a GPU is reported, not an error.
    """
    from envengineer.loop.preflight import input_checks, plugin_checks, run_checks, table

    registry, console = state.registry, state.console
    components = None
    if config is not None:
        from envengineer.loop.runconfig import load_run_config, resolve

        resolved = resolve(load_run_config(config, overrides or (), registry), registry)
        components = [resolved.trainer, resolved.policy, resolved.engineer]
    inputs = input_checks(components) if components is not None else []
    checks = run_checks(registry.pm, components) + inputs
    console.print(table(checks))
    if config is None or lock is not None:
        print_lock_report(lock, console)
    gpu = next((c for c in checks if c.name == "gpus"), None)
    if gpu is not None and gpu.status == "missing":
        console.print("[bold]no GPU[/] on this machine: CPU runs (the tiny policy, trl) work; GPU rounds (verl, vLLM) need one.")
    if components is not None:
        needs_gpu = bool(plugin_checks(registry.pm, components))
        missing = [c.name for c in checks if c.status == "missing"]
        if inputs:  # stops the run before anything is written, on any machine
            console.print(f"[bold red]{escape(str(config))} would stop before it starts:[/] {escape(', '.join(c.name for c in inputs))} "
                          "missing (run says the same)")
            raise typer.Exit(1)
        if not needs_gpu:
            console.print(f"{escape(str(config))}: its trainer and policy need no GPU; nothing here stops it.")
        elif missing:
            console.print(f"[bold red]{escape(str(config))} would stop before training:[/] missing {escape(', '.join(missing))}")
            raise typer.Exit(1)
        else:
            console.print(f"{escape(str(config))}: everything its GPU rounds need is here.")


def print_lock_report(lock: Path | None, console: Any) -> None:
    """This environment against the lock (:mod:`~envengineer.plugins.gpu.lock`), as a table of what differs."""
    from rich.table import Table

    from envengineer.plugins.gpu.lock import compare, find_lock, read_lock

    path = lock if lock is not None else find_lock(Path.cwd())
    if path is None:
        console.print("[bold]lock[/]: none found (an install from a wheel: the tested set of versions, requirements/lock.txt, "
                      "is in the source checkout; --lock FILE compares with one)", soft_wrap=True)
        return
    try:
        pins = read_lock(path)
    except (OSError, ValueError) as exc:
        raise EnvEngineerError(f"--lock {path}: {exc}") from None
    shown = _relative(path)
    findings = compare(pins, shown)
    if not findings:
        console.print(f"[green]lock[/]: every installed package of {escape(shown)} is at its tested version ({len(pins)} pins)", soft_wrap=True)
        return
    out = Table(title=f"packages the tests never ran (against {shown})")
    for column in ("package", "installed", "lock", "fix"):
        out.add_column(column, overflow="fold")
    for f in findings:
        out.add_row(escape(f.name), escape(f.found), escape(f.locked), escape(f.fix))
    console.print(out)
    console.print(f"{len(findings)} package(s) differ from the tested set; the quickstart and the tests ran on {escape(shown)}: "
                  f"reinstall through it (pip install -c {escape(shown)} -e \".[dev]\") or run the fixes above", soft_wrap=True)


def _relative(path: Path) -> str:
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


@hookimpl
def print_dry_run(config: Path, overrides: tuple[str, ...], gpu_memory_gb: float, state: CommandState) -> None:
    """The run's memory plan (``envengineer plan``) in ``run --dry-run``'s output; a run with nothing to plan says why."""
    from envengineer.plugins.gpu.plan import plan_run, print_plan

    try:
        plan = plan_run(config, overrides, state.registry, gpu_memory_gb)
    except EnvEngineerError as exc:
        state.console.print(f"[bold]memory plan[/]: none: {escape(str(exc))}", highlight=False, soft_wrap=True)
        return
    state.console.rule("memory plan")
    print_plan(plan, state.console, command=" ".join(["envengineer plan", str(config), *overrides]))


def plan_command(
    state: CommandState,
    config: Path = typer.Argument(..., help="run config YAML"),
    overrides: Optional[list[str]] = typer.Argument(None, help="dotted overrides KEY.SUB=VALUE, as for run", show_default=False),
    gpu_memory_gb: float = typer.Option(80.0, "--gpu-memory-gb", min=1.0, help="memory of one GPU, in GB of 10^9 bytes"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="also write the plan to this JSON file"),
) -> None:
    """GPU memory per GPU of a run before launch, per phase (weights, gradients, optimizer state, reference,
    worst micro-batch, vLLM's share); exits 1 when it does not fit, naming overrides that make it fit."""
    from envengineer.fileio import write_json
    from envengineer.plugins.gpu.plan import plan_run, print_plan

    plan = plan_run(config, overrides or (), state.registry, gpu_memory_gb)
    print_plan(plan, state.console, command=" ".join(["envengineer plan", str(config), *(overrides or ())]))
    if json_path is not None:
        write_json(json_path, plan.to_dict())
    if not plan.fits:
        raise typer.Exit(1)


@hookimpl
def register_commands(cli: Any, state: CommandState) -> dict[str, str]:
    cli.command()(state.command(doctor))
    cli.command("plan")(state.command(plan_command))
    return {"doctor": "run", "plan": "doctor"}
