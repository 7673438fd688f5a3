"""A suite: every run config of a folder, over several seeds, then the paper's tables.

Each config runs once per seed (the seed overridden, the run directory
``<output>/<config-stem>/seed-<s>``) through the resumable loop, one after the other:
finished runs are skipped, interrupted ones resume, a run that raises is recorded and the
others still run. The tables group the configs by their ``suite.table`` field (the
config decides, not its file name); a row is one config, each figure the mean ± sd over
its finished seeds. Benchmark columns are whatever the configs evaluate, with the aggregate
over subsets each benchmark declares (e.g. MAPF's Sum over subsets) as the evaluation recorded it.
"""

from __future__ import annotations

import fnmatch
import json
import re
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from envengineer.compare import MISSING, Column, Comparison, Stat, comparison_note, engineer_label, metric_columns, run_figures
from envengineer.drawn import BenchView
from envengineer.errors import EnvEngineerError, InputError
from envengineer.runconfig import RunConfig, validation_set
from envengineer.rundir import RunDir

#: Suite bookkeeping in the output folder: the last error of every run that raised.
STATUS_FILE = "suite.json"
DEFAULT_TABLE = "runs"

FINISHED, PARTIAL, TODO, DIFFERENT, FAILED = "finished", "partial", "to do", "different run", "failed"


@dataclass
class SuiteRun:
    """One config at one seed."""

    config: RunConfig  # seed and output overridden
    seed: int
    run_dir: Path
    status: str = TODO
    error: str | None = None  # the last error this run raised (this invocation or an earlier one)
    same_as: str | None = None  # another config whose run at this seed is this one (run once, shown in both rows)

    @property
    def done(self) -> bool:
        return self.status == FINISHED


@dataclass
class SuiteEntry:
    """One config: one row of one table."""

    path: Path
    config: RunConfig
    runs: list[SuiteRun] = field(default_factory=list)

    @property
    def stem(self) -> str:
        return self.path.stem

    @property
    def table(self) -> str:
        return self.config.suite.table if self.config.suite else DEFAULT_TABLE

    @property
    def row(self) -> str:
        return (self.config.suite.row if self.config.suite else None) or self.config.name

    @property
    def order(self) -> int:
        return self.config.suite.order if self.config.suite else 0


@dataclass
class Suite:
    output: Path
    entries: list[SuiteEntry]

    @property
    def runs(self) -> list[SuiteRun]:
        return [run for entry in self.entries for run in entry.runs]

    def failed(self) -> list[SuiteRun]:
        return [run for run in self.runs if run.status == FAILED]


# ------------------------------------------------------------------ planning


def config_files(sources: Sequence[str | Path]) -> list[Path]:
    """The YAML files named, or found directly in the folders named (sorted); errors name the path."""
    if not sources:
        raise EnvEngineerError("suite: give at least one folder of run configs or config file")
    files: list[Path] = []
    for source in map(Path, sources):
        if source.is_dir():
            found = sorted(p for p in source.iterdir() if p.is_file() and p.suffix.lower() in (".yaml", ".yml"))
            if not found:
                raise EnvEngineerError(f"{source}: no run configs (*.yaml) in this folder")
            files.extend(found)
        elif source.is_file():
            files.append(source)
        else:
            raise EnvEngineerError(f"{source}: no such folder or run config file")
    stems: dict[str, Path] = {}
    for path in files:
        if path.stem in stems and stems[path.stem].resolve() != path.resolve():
            raise EnvEngineerError(f"{path}: same file name as {stems[path.stem]}; their runs would share {path.stem}/ in the suite folder")
        stems[path.stem] = path
    return list(stems.values())


def _identity(data: Any) -> dict[str, Any]:
    """The run as the loop judges it on resume, less ``output``: a suite folder moved elsewhere still holds its runs."""
    from envengineer.loop import run_identity

    return {k: v for k, v in run_identity(data).items() if k != "output"}


def _same_run(config: RunConfig) -> str:
    """Two configs that differ only in name, output and suite labels train the same run."""
    identity = _identity(config.model_dump(mode="json"))
    identity.pop("name", None)
    return json.dumps(identity, sort_keys=True, default=str)


def run_state(run_dir: Path, config: RunConfig) -> str:
    """finished / partial / to do, or "different run" when the folder holds another config."""
    from envengineer.fileio import read_yaml
    from envengineer.rundir import RunDir

    folder = RunDir(run_dir)
    if not folder.run_yaml.exists():
        return TODO
    if _identity(read_yaml(folder.run_yaml)) != _identity(config.model_dump(mode="json")):
        return DIFFERENT
    return FINISHED if folder.done("round_end", config.rounds - 1) else PARTIAL


def plan(sources: Sequence[str | Path], *, seeds: int, output: str | Path, only: str | None = None) -> Suite:
    """Read every config (errors name the file and field) and the state of each of its runs."""
    from envengineer.runconfig import load_run_config

    if seeds < 1:
        raise EnvEngineerError(f"--seeds {seeds}: give at least one seed")
    out = Path(output)
    entries = []
    first: dict[str, tuple[str, SuiteRun]] = {}  # same run -> the config that runs it, and its run
    for path in config_files(sources):
        config = load_run_config(path)
        if only and not (fnmatch.fnmatch(path.stem, only) or fnmatch.fnmatch(config.name, only)):
            continue
        entry = SuiteEntry(path, config)
        for seed in range(seeds):
            run_dir = out / path.stem / f"seed-{seed}"
            seeded = config.model_copy(update={"seed": seed, "output": str(run_dir)})
            owner = first.get(_same_run(seeded))
            if owner is not None:  # e.g. the paper's V6 row and its checkpoint-engineer row
                shared = owner[1]
                entry.runs.append(SuiteRun(shared.config, seed, shared.run_dir, shared.status, same_as=owner[0]))
                continue
            run = SuiteRun(seeded, seed, run_dir, run_state(run_dir, seeded))
            first[_same_run(seeded)] = (path.stem, run)
            entry.runs.append(run)
        entries.append(entry)
    if not entries:
        raise EnvEngineerError(f"--only {only}: no config's file stem or name matches" if only else "suite: no run configs")
    errors = _read_errors(out / STATUS_FILE)
    for run in (r for e in entries for r in e.runs):
        error = errors.get(_key(out, run))
        if error and not run.done:
            run.status, run.error = FAILED, str(error)
    return Suite(out, entries)


def _read_errors(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: unreadable suite status ({exc}); delete it to forget recorded failures") from None
    errors = data.get("errors") if isinstance(data, dict) else None
    return {str(k): str(v) for k, v in errors.items()} if isinstance(errors, dict) else {}


def _key(output: Path, run: SuiteRun) -> str:
    return run.run_dir.relative_to(output).as_posix()


def _save_errors(suite: Suite) -> None:
    from envengineer.fileio import write_json

    path = suite.output / STATUS_FILE
    errors = _read_errors(path)  # runs left out by --only keep theirs
    for run in (r for r in suite.runs if r.same_as is None):
        errors.pop(_key(suite.output, run), None)
        if run.error and not run.done:
            errors[_key(suite.output, run)] = run.error
    write_json(path, {"errors": dict(sorted(errors.items()))})


def plan_table(suite: Suite) -> Any:
    from rich.table import Table

    table = Table(title=f"suite plan: {len(suite.entries)} configs × {len(suite.entries[0].runs)} seeds in {suite.output}", title_justify="left")
    for column in ("config", "table", "row", "seed", "state", "run directory"):
        table.add_column(column)
    style = {FINISHED: "green", PARTIAL: "yellow", TODO: "", DIFFERENT: "red", FAILED: "red"}
    for entry in suite.entries:
        for run in entry.runs:
            state = run.status + (f": {run.error}" if run.error else "") + (f" (the run of {run.same_as})" if run.same_as else "")
            table.add_row(escape(str(entry.path)), escape(entry.table), escape(entry.row), str(run.seed),
                          f"[{style[run.status]}]{escape(state)}[/]" if style[run.status] else escape(state), escape(str(run.run_dir)))
    return table


# ------------------------------------------------------------------ running


def execute(suite: Suite, *, registry: Any = None, console: Console | None = None) -> Suite:
    """Run every unfinished run in turn (GPU configs: never two at once); record failures."""
    from envengineer.display import progress_bar
    from envengineer.loop import Loop
    from envengineer.registry import load_registry
    from envengineer.runconfig import resolve

    console = console or Console()
    registry = registry or load_registry()
    todo = [(entry, run) for entry in suite.entries for run in entry.runs if not run.done and run.same_as is None]
    skipped = sum(1 for run in suite.runs if run.done and run.same_as is None)
    if skipped:
        console.print(f"[dim]{skipped} finished run(s) skipped[/]")
    if not todo:
        return suite
    suite.output.mkdir(parents=True, exist_ok=True)
    progress, advance = progress_bar(f"suite: {len(todo)} run(s)", len(todo), console=console)
    with progress:
        for entry, run in todo:
            verb = "resuming" if run.status in (PARTIAL, FAILED) and RunDir(run.run_dir).run_yaml.exists() else "starting"
            console.rule(f"{escape(entry.stem)} seed {run.seed} ({verb})")
            try:
                loop = Loop(resolve(run.config, registry), registry, console)
                loop.run_all()
            except Exception as exc:  # one broken run must not stop the suite; it is reported at the end
                run.status = FAILED
                run.error = str(exc) if isinstance(exc, EnvEngineerError) else f"{type(exc).__name__}: {exc}"
                if not isinstance(exc, EnvEngineerError):
                    from envengineer.fileio import write_text

                    write_text(suite.output / entry.stem / f"seed-{run.seed}.traceback.txt", traceback.format_exc())
                console.print(f"[bold red]{escape(entry.stem)} seed {run.seed} failed:[/] {escape(run.error)}", highlight=False)
            else:
                run.status, run.error = run_state(run.run_dir, run.config), None
            for shared in (r for r in suite.runs if r.same_as is not None and r.run_dir == run.run_dir):
                shared.status, shared.error = run.status, run.error
            _save_errors(suite)
            advance()
    return suite


# ------------------------------------------------------------------ tables


def _context_label(context: dict[str, Any] | str) -> str:
    if isinstance(context, str):
        return context
    parts = [str(context.get("preset", ""))] if context.get("preset") else []
    parts += [f"{k}={v}" for k, v in context.items() if k != "preset"]
    return ", ".join(parts) or MISSING


def _seeds(runs: Sequence[SuiteRun]) -> str:
    return ",".join(str(r.seed) for r in runs)


def _designs(run: SuiteRun) -> list[bool]:
    from envengineer.rundir import RunDir

    return [bool(line.get("fallback")) for line in RunDir(run.run_dir).history() if line.get("step") == "design"]


def entry_row(entry: SuiteEntry, benchmarks: Sequence[BenchView], registry: Any = None) -> dict[str, Any]:
    """One table row: mean ± sd of each figure over the entry's finished seeds, and what is missing."""
    from envengineer.runview import load_run

    finished = [run for run in entry.runs if run.done]
    per_seed = [run_figures(load_run(run.run_dir, registry), benchmarks)[0] for run in finished]
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


def bench_views(names: Sequence[str], registry: Any) -> list[BenchView]:
    """The configs' benchmarks as their tasks declare them (label: the benchmark's name, as
    ``envengineer bench list`` shows it), in the configs' order."""
    known = set(registry.names("benchmark")) if registry is not None else set()
    return [BenchView.of(n, registry.benchmark(n) if n in known else None) for n in names]


def tables(suite: Suite, registry: Any = None) -> dict[str, Comparison]:
    """One comparison per ``suite.table``, in order of first appearance; rows by (order, file name).
    ``registry`` resolves the benchmarks and the runs' tasks (default: the installed plugins)."""
    from envengineer.compare import _registry

    registry = registry if registry is not None else _registry()
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


def slug(title: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", title).strip("-").lower() or "table"


def write_tables(suite: Suite, console: Console | None = None, registry: Any = None) -> list[Path]:
    """Write ``<output>/<table>.md`` and ``.csv`` atomically for every table; print them."""
    from envengineer.compare import rich_tables, to_csv, to_markdown
    from envengineer.fileio import write_text

    written = []
    for title, comparison in tables(suite, registry).items():
        base = suite.output / slug(title)
        write_text(base.with_suffix(".md"), f"# {title}\n\n" + to_markdown(comparison))
        write_text(base.with_suffix(".csv"), to_csv(comparison))
        written += [base.with_suffix(".md"), base.with_suffix(".csv")]
        if console is not None:
            for table in rich_tables(comparison, title=title):
                console.print(table)
    return written
