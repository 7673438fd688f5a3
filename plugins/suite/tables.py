"""A suite: every run config of a folder, over several seeds, then the paper's tables.

The configs are files (every ``*.yaml`` of a folder) or the **arms** of a manifest: one base
config plus each arm's dotted overrides (``suite.yaml``: ``{base: base.yaml, arms: {fixed:
{engineer.name: fixed}, ...}}``), applied and checked exactly as ``envengineer run BASE
KEY=VALUE ...`` does. Each config runs once per seed (the seed overridden, the run directory
``<output>/<config-stem or arm>/seed-<s>``) through the resumable loop: finished runs are
skipped, interrupted ones resume, a run that raises is recorded and the others still run.
Runs go one at a time in this process, or ``jobs`` at a time as separate processes (the
shared starting policy prepared first, once). The tables group the configs by their
``suite.table`` field (the config decides, not its file name); a row is one config, each
figure the mean ± sd over its finished seeds. Benchmark columns are whatever the configs
evaluate, with the aggregate over subsets each benchmark declares (e.g. MAPF's Sum over
subsets) as the evaluation recorded it. The per-subset tables, paired tests and plots are
in :mod:`envengineer.plugins.suite.arms.page`, the tests with seeds as the unit in :mod:`envengineer.plugins.suite.arms.seeds`.

This module is the suite's entry point (what ``envengineer suite`` calls: :func:`plan`,
:func:`plan_table`, :func:`execute`, :func:`write_tables`) and writes the summary tables. The
rest, each module importing only the ones before it: :mod:`envengineer.plugins.suite.model` (entries,
runs, the status file, helpers shared with the report), :mod:`envengineer.plugins.suite.manifest`
(config files and manifests), :mod:`envengineer.plugins.suite.plan` (the runs and their state),
:mod:`envengineer.plugins.suite.local` (running them), and the arms report
(:mod:`envengineer.plugins.suite.arms.page`), which never imports this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from envengineer.plugins.report.compare import MISSING, Column, Comparison, Stat, comparison_note, engineer_label, metric_columns, run_figures
from envengineer.plugins.report.drawn import BenchView
from envengineer.loop.runconfig import validation_set
from envengineer.plugins.suite.model import (
    DIFFERENT,
    FAILED,
    FINISHED,
    PARTIAL,
    TODO,
    Suite,
    SuiteEntry,
    SuiteRun,
    bench_views,
    slug,
)
from envengineer.plugins.suite.plan import plan, plan_table
from envengineer.plugins.suite.local import execute as execute_here

__all__ = [
    "DIFFERENT", "FAILED", "FINISHED", "PARTIAL", "TODO", "Suite", "SuiteEntry", "SuiteRun",
    "entry_row", "execute", "plan", "plan_table", "tables", "write_tables",
]


def execute(suite: Suite, *, registry: Any = None, console: Console | None = None, jobs: int = 1, launcher: Any = None) -> Suite:
    """Run every unfinished run: on this machine (``launcher`` None or named ``local``: ``jobs`` at a
    time), or as jobs on a cluster (:class:`~envengineer.plugins.suite.launch.base.LauncherOptions` naming ``ray``
    or ``slurm``: :mod:`envengineer.plugins.suite.launch.jobs`)."""
    if launcher is None or launcher.name == "local":
        return execute_here(suite, registry=registry, console=console, jobs=jobs)
    from envengineer.plugins.suite.launch.jobs import execute_on_cluster

    return execute_on_cluster(suite, launcher, registry=registry, console=console)


def _context_label(context: dict[str, Any] | str) -> str:
    if isinstance(context, str):
        return context
    parts = [str(context.get("preset", ""))] if context.get("preset") else []
    parts += [f"{k}={v}" for k, v in context.items() if k != "preset"]
    return ", ".join(parts) or MISSING


def _seeds(runs: Sequence[SuiteRun]) -> str:
    return ",".join(str(r.seed) for r in runs)


def _designs(run: SuiteRun) -> list[bool]:
    from envengineer.store.rundir import RunDir, Step

    return [bool(line.get("fallback")) for line in RunDir(run.run_dir).history() if line.get("step") == Step.DESIGN]


def entry_row(entry: SuiteEntry, benchmarks: Sequence[BenchView], registry: Any = None) -> dict[str, Any]:
    """One table row: mean ± sd of each figure over the entry's finished seeds, and what is missing."""
    from envengineer.plugins.report.view import load_run_view

    finished = [run for run in entry.runs if run.done]
    per_seed = [run_figures(load_run_view(run.run_dir, registry), benchmarks)[0] for run in finished]
    keys = {key for figures in per_seed for key in figures}
    row: dict[str, Any] = {key: Stat.of([figures.get(key) for figures in per_seed]) for key in keys}
    designs = [flag for run in entry.runs for flag in _designs(run)]
    notes = []
    failed = [run for run in entry.runs if run.status == FAILED]
    if failed:
        notes.append(f"failed: seed {_seeds(failed)} ({failed[0].error})")
    for state, label in ((PARTIAL, "incomplete"), (TODO, "not run"), (DIFFERENT, "folder holds a different run")):
        runs = [run for run in entry.runs if run.status == state]
        if runs:
            notes.append(f"{label}: seed {_seeds(runs)}")
    if designs and all(designs):
        notes.append("all designs fell back")
    shared_with = sorted({run.same_as for run in entry.runs if run.same_as})
    if shared_with:
        notes.append(f"same run as {', '.join(shared_with)}")
    row.update({
        "row": entry.row,
        "engineer": engineer_label(entry.config.model_dump(mode="json")),
        "context": _context_label(entry.config.context),
        "seeds": f"{len(finished)}/{len(entry.runs)}",
        "fallback": f"{sum(designs)}/{len(designs)}" if designs else None,
        "status": "; ".join(notes) or "ok",
    })
    return row


def tables(suite: Suite, registry: Any) -> dict[str, Comparison]:
    """One comparison per ``suite.table``, in order of first appearance; rows by (order, file name).
    ``registry`` resolves the benchmarks and the runs' tasks."""
    grouped: dict[str, list[SuiteEntry]] = {}
    for entry in suite.entries:
        grouped.setdefault(entry.table, []).append(entry)
    result = {}
    for title, entries in grouped.items():
        entries = sorted(entries, key=lambda e: (e.order, e.stem))
        benchmarks = bench_views(list(dict.fromkeys(b for e in entries for b in e.config.eval.benchmarks)), registry)
        validations = sorted({validation_set(e.config, registry) or "the task's" for e in entries})
        columns = [
            Column("row", "row", "", "row", False),
            Column("engineer", "engineer", "", "engineer", False),
            Column("context", "context", "", "context", False),
            Column("seeds", "seeds finished", "", "seeds", False),
            *metric_columns(benchmarks, {b.name: b.name for b in benchmarks}),
            Column("fallback", "designs fell back", "", "fell back", False),
            Column("status", "status", "", "status", False),
        ]
        note = "Each figure: mean ± sd (sample, n − 1) over the finished seeds, in percent. " + comparison_note(
            benchmarks,
            f"Benchmarks from the last round that ran them; validation ({', '.join(validations)}) from the last round. "
            f"designs fell back: design steps that kept the config because the engineer's answer was unusable, over all seeds.",
        )
        result[title] = Comparison(columns, [entry_row(e, benchmarks, registry) for e in entries], note, over_seeds=True)
    return result


def write_tables(suite: Suite, registry: Any, console: Console | None = None) -> list[Path]:
    """Write ``<output>/<table>.md`` and ``.csv`` atomically for every table and print them; then each
    table's arms in detail (:mod:`envengineer.plugins.suite.arms.page`): ``<table>-arms.md``, its CSVs and plots,
    printing the tests with seeds as the unit."""
    from envengineer.plugins.report.compare import rich_tables, to_csv, to_markdown
    from envengineer.fileio import write_text
    from envengineer.plugins.suite.arms.runs import build
    from envengineer.plugins.suite.arms.page import write_arms_report

    written = []
    grouped: dict[str, list[SuiteEntry]] = {}
    for entry in suite.entries:
        grouped.setdefault(entry.table, []).append(entry)
    for title, comparison in tables(suite, registry).items():
        base = suite.output / slug(title)
        write_text(base.with_suffix(".md"), f"# {title}\n\n" + to_markdown(comparison))
        write_text(base.with_suffix(".csv"), to_csv(comparison))
        written += [base.with_suffix(".md"), base.with_suffix(".csv")]
        if console is not None:
            for table in rich_tables(comparison, title=title):
                console.print(table)
        written += write_arms_report(build(title, grouped[title], registry), suite.output, slug(title), console=console)
    return written
