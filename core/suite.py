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
in :mod:`envengineer.suite_report`, the tests with seeds as the unit in :mod:`envengineer.suite_stats`.
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

from pydantic import BaseModel, ConfigDict, Field, ValidationError
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
#: The manifest a folder of arms holds (a folder without it: every *.yaml is a run config).
MANIFEST = "suite.yaml"
#: The arm paired tests compare against when the manifest names none and an arm has this name.
DEFAULT_BASELINE = "fixed"

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
    """One config: one row of one table (a config file, or one arm of a manifest)."""

    path: Path  # the config file, or the manifest that names the arm
    config: RunConfig
    runs: list[SuiteRun] = field(default_factory=list)
    arm: str | None = None  # the arm's name (its run folder); None for a config file
    base: Path | None = None  # an arm's base config
    overrides: tuple[str, ...] = ()  # an arm's overrides of its base, as `envengineer run` takes them
    baseline: bool = False  # the arm the suite's paired tests compare the others against

    @property
    def stem(self) -> str:
        """The entry's folder in the suite output: the arm's name, or the config file's stem."""
        return self.arm or self.path.stem

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


class Manifest(BaseModel):
    """A suite manifest (``suite.yaml``): one base run config and its arms, each the base with
    dotted overrides as ``envengineer run BASE KEY=VALUE ...`` takes them."""

    model_config = ConfigDict(extra="forbid")

    base: str = Field(min_length=1, description="the base run config, relative to the manifest")
    table: str | None = Field(None, min_length=1, description="the table the arms are rows of (default: the base's suite.table, else 'runs')")
    baseline: str | None = Field(None, min_length=1, description="the arm the paired tests compare the others against (default: the arm named fixed)")
    arms: dict[str, Any] = Field(min_length=1, description="arm name -> {dotted.key: value} or [KEY=VALUE, ...] (null: the base as it is)")


#: Fields the suite sets on every run: an arm that sets them would be silently overridden.
SUITE_SET = ("seed", "output")
ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def is_manifest(path: Path) -> bool:
    """A file named ``suite.yaml``, or a YAML file whose top level has ``arms`` (a run config never has it)."""
    from envengineer.fileio import read_yaml

    if path.name == MANIFEST:
        return True
    data = read_yaml(path)
    return isinstance(data, dict) and "arms" in data


def yaml_value(value: Any) -> str:
    """``value`` as the right-hand side of a command-line override (``engineer={name: fixed}``)."""
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**9, allow_unicode=True)
    text = text[: -len("\n...\n")] if text.endswith("\n...\n") else text.rstrip("\n")
    return text


def arm_overrides(manifest: Path, arm: str, spec: Any) -> tuple[str, ...]:
    """An arm's overrides as ``KEY=VALUE`` strings; errors name the manifest and the arm's field."""
    where = f"{manifest}: arms.{arm}"
    if spec is None:
        return ()
    if isinstance(spec, dict):
        items = []
        for key, value in spec.items():
            if not isinstance(key, str) or not key.strip():
                raise EnvEngineerError(f"{where}: {key!r}: a key is a dotted field name, e.g. engineer.name")
            items.append((key.strip(), f"{key.strip()}={yaml_value(value)}"))
    elif isinstance(spec, list):
        items = []
        for item in spec:
            key, sep, _ = str(item).partition("=")
            if not isinstance(item, str) or not sep or not key.strip():
                raise EnvEngineerError(f"{where}: {item!r}: expected KEY=VALUE, e.g. engineer.name=fixed")
            items.append((key.strip(), item))
    else:
        raise EnvEngineerError(
            f"{where}: expected a mapping of dotted fields to values ({{engineer.name: fixed}}) or a list of "
            f"KEY=VALUE overrides, not {type(spec).__name__}"
        )
    for key, _ in items:
        if key.split(".")[0] in SUITE_SET:
            raise EnvEngineerError(f"{where}.{key}: set by the suite for every run (--seeds, --output); leave it out")
    return tuple(item for _, item in items)


def read_manifest(path: Path, registry: Any = None) -> list[SuiteEntry]:
    """A manifest's arms, each its base with its overrides applied and checked as `envengineer run`
    checks them (every plugin section included); errors name the manifest, the arm and the field."""
    import copy

    from envengineer.errors import ConfigError
    from envengineer.fileio import read_yaml
    from envengineer.registry import format_validation_error
    from envengineer.runconfig import apply_overrides, parse_run_config, resolve

    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path}:\n{format_validation_error(exc)}") from None
    for arm in manifest.arms:
        if not ARM_NAME.fullmatch(str(arm)):
            raise ConfigError(f"{path}: arms.{arm}: an arm's name names its run folder: letters, digits, . _ - (not starting with . _ -)")
    if manifest.baseline is not None and manifest.baseline not in manifest.arms:
        raise ConfigError(f"{path}: baseline: no arm named {manifest.baseline} (arms: {', '.join(manifest.arms)})")
    baseline = manifest.baseline or (DEFAULT_BASELINE if DEFAULT_BASELINE in manifest.arms else None)
    base_path = Path(manifest.base) if Path(manifest.base).is_absolute() else path.parent / manifest.base
    if not base_path.is_file():
        raise ConfigError(f"{path}: base: {base_path}: no such run config file")
    base = read_yaml(base_path)
    if not isinstance(base, dict):
        raise ConfigError(f"{base_path}: expected a mapping at the top level")
    if "arms" in base:
        raise ConfigError(f"{path}: base: {base_path} is a manifest, not a run config")
    base_suite = base.get("suite") if isinstance(base.get("suite"), dict) else {}
    table = manifest.table or base_suite.get("table") or DEFAULT_TABLE
    if registry is None:
        from envengineer.registry import load_registry

        registry = load_registry()
    entries = []
    for order, (arm, spec) in enumerate(manifest.arms.items()):
        overrides = arm_overrides(path, arm, spec)
        arm_data = copy.deepcopy(base)
        arm_data["name"] = f"{base['name']}-{arm}" if isinstance(base.get("name"), str) else arm
        arm_data["suite"] = {**base_suite, "table": table, "row": arm, "order": order}
        where = f"{path}: arm {arm} ({base_path}" + (f" with {' '.join(overrides)})" if overrides else ")")
        try:
            config = parse_run_config(apply_overrides(arm_data, overrides), where, registry)
            resolve(config, registry)  # every plugin section, as `envengineer run` checks it before writing anything
        except EnvEngineerError as exc:
            message = str(exc) if str(exc).startswith(where) else f"{where}: {exc}"
            try:
                error = type(exc)(message)
            except Exception:  # noqa: BLE001 - an error type with another signature: say it as a config error
                error = ConfigError(message)
            raise error from None
        entries.append(SuiteEntry(path, config, arm=arm, base=base_path, overrides=overrides, baseline=arm == baseline))
    return entries


def config_files(sources: Sequence[str | Path]) -> list[Path]:
    """The YAML files named, or found directly in the folders named (sorted); a folder that holds a
    manifest (``suite.yaml``) gives the manifest alone. Errors name the path."""
    if not sources:
        raise EnvEngineerError("suite: give at least one folder of run configs, manifest or config file")
    files: list[Path] = []
    for source in map(Path, sources):
        if source.is_dir():
            if (source / MANIFEST).is_file():
                files.append(source / MANIFEST)
                continue
            found = sorted(p for p in source.iterdir() if p.is_file() and p.suffix.lower() in (".yaml", ".yml"))
            if not found:
                raise EnvEngineerError(f"{source}: no run configs (*.yaml) in this folder")
            files.extend(found)
        elif source.is_file():
            files.append(source)
        else:
            raise EnvEngineerError(f"{source}: no such folder or run config file")
    return list({path.resolve(): path for path in files}.values())


def read_entries(sources: Sequence[str | Path], registry: Any = None) -> list[SuiteEntry]:
    """Every config file and manifest arm of ``sources``, checked; two that would share a run folder are refused."""
    from envengineer.runconfig import load_run_config

    entries: list[SuiteEntry] = []
    for path in config_files(sources):
        if is_manifest(path):
            entries.extend(read_manifest(path, registry))
        else:
            entries.append(SuiteEntry(path, load_run_config(path, registry=registry)))
    stems: dict[str, SuiteEntry] = {}
    for entry in entries:
        other = stems.get(entry.stem)
        if other is not None:
            what = lambda e: f"arm {e.arm} of {e.path}" if e.arm else str(e.path)  # noqa: E731
            raise EnvEngineerError(f"{what(entry)}: same name as {what(other)}; their runs would share {entry.stem}/ in the suite folder")
        stems[entry.stem] = entry
    return entries


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


def plan(sources: Sequence[str | Path], *, seeds: int, output: str | Path, only: str | None = None, registry: Any = None) -> Suite:
    """Read every config and arm (errors name the file and field) and the state of each of its runs.
    ``registry`` checks the arms' plugin sections (default: the installed plugins, loaded only for a manifest)."""
    if seeds < 1:
        raise EnvEngineerError(f"--seeds {seeds}: give at least one seed")
    out = Path(output)
    entries = []
    first: dict[str, tuple[str, SuiteRun]] = {}  # same run -> the config that runs it, and its run
    for entry in read_entries(sources, registry):
        config = entry.config
        if only and not (fnmatch.fnmatch(entry.stem, only) or fnmatch.fnmatch(config.name, only)):
            continue
        for seed in range(seeds):
            run_dir = out / entry.stem / f"seed-{seed}"
            seeded = config.model_copy(update={"seed": seed, "output": str(run_dir)})
            owner = first.get(_same_run(seeded))
            if owner is not None:  # e.g. the paper's V6 row and its checkpoint-engineer row
                shared = owner[1]
                entry.runs.append(SuiteRun(shared.config, seed, shared.run_dir, shared.status, same_as=owner[0]))
                continue
            run = SuiteRun(seeded, seed, run_dir, run_state(run_dir, seeded))
            first[_same_run(seeded)] = (entry.stem, run)
            entry.runs.append(run)
        entries.append(entry)
    if not entries:
        raise EnvEngineerError(f"--only {only}: no config's file stem, arm or name matches" if only else "suite: no run configs")
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
            source = f"{entry.path} [{entry.arm}: {' '.join(entry.overrides) or 'the base'}]" if entry.arm else str(entry.path)
            table.add_row(escape(source), escape(entry.table), escape(entry.row), str(run.seed),
                          f"[{style[run.status]}]{escape(state)}[/]" if style[run.status] else escape(state), escape(str(run.run_dir)))
    return table


# ------------------------------------------------------------------ running


def _todo(suite: Suite) -> list[tuple[SuiteEntry, SuiteRun]]:
    """The unfinished runs, seed by seed (every config's seed 0 first): a suite stopped half-way
    holds whole seeds to compare."""
    todo = [(entry, run) for entry in suite.entries for run in entry.runs if not run.done and run.same_as is None]
    return sorted(todo, key=lambda item: item[1].seed)  # stable: configs in their order within a seed


def _finished(suite: Suite, run: SuiteRun) -> None:
    for shared in (r for r in suite.runs if r.same_as is not None and r.run_dir == run.run_dir):
        shared.status, shared.error = run.status, run.error
    _save_errors(suite)


def execute(suite: Suite, *, registry: Any = None, console: Console | None = None, jobs: int = 1) -> Suite:
    """Run every unfinished run, record failures. ``jobs`` 1: one after the other in this process
    (GPU configs: never two at once); more: that many at a time, each in its own process
    (:mod:`envengineer.suite_worker`), after the starting policies are prepared here, once each."""
    from envengineer.display import progress_bar
    from envengineer.loop import Loop
    from envengineer.registry import load_registry
    from envengineer.runconfig import resolve

    if jobs < 1:
        raise EnvEngineerError(f"--jobs {jobs}: give at least one")
    console = console or Console()
    registry = registry or load_registry()
    todo = _todo(suite)
    skipped = sum(1 for run in suite.runs if run.done and run.same_as is None)
    if skipped:
        console.print(f"[dim]{skipped} finished run(s) skipped[/]")
    if not todo:
        return suite
    suite.output.mkdir(parents=True, exist_ok=True)
    if jobs > 1:
        return _execute_parallel(suite, todo, registry, console, jobs)
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
            _finished(suite, run)
            advance()
    return suite


def prepare_policies(runs: Sequence[SuiteRun], registry: Any, console: Console) -> None:
    """Prepare each distinct starting policy of ``runs`` once, here (the tiny policy's warm start is
    built and cached), so that parallel runs find it ready instead of building it side by side.
    A policy that cannot be prepared is left to its runs, which then fail with the error."""
    from envengineer.display import stage_progress
    from envengineer.runconfig import resolve

    seen: set[str] = set()
    for run in runs:
        key = json.dumps([run.config.task, run.config.policy], sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        try:
            resolved = resolve(run.config, registry)
            if not resolved.policy.has_weights:
                continue
            console.print(f"[bold]preparing the starting policy[/] {escape(resolved.policy.name)} (shared by the runs that use it)")
            with stage_progress(console) as progress:
                resolved.policy.prepare(generator=resolved.generator, progress=progress)
        except Exception as exc:  # noqa: BLE001 - its runs meet the same error and record it
            console.print(f"[yellow]could not prepare the starting policy of {escape(str(run.run_dir))}:[/] {escape(str(exc))}", highlight=False)


def _log_path(suite: Suite, entry: SuiteEntry, run: SuiteRun) -> Path:
    return suite.output / entry.stem / f"seed-{run.seed}.log"


def _history(run: SuiteRun) -> list[dict[str, Any]]:
    """The run's history so far, as its process writes it ([] while unreadable: a line half-written)."""
    folder = RunDir(run.run_dir)
    try:
        return folder.history() if folder.history_path.exists() else []
    except Exception:  # noqa: BLE001 - only shown on the progress line
        return []


def _where(history: list[dict[str, Any]]) -> str:
    """The last finished step (``round 2: train``)."""
    if not history:
        return "starting"
    step, round = history[-1].get("step", "?"), history[-1].get("round")
    return f"{step}" if round is None else f"round {round}: {step} done"


def _execute_parallel(suite: Suite, todo: list[tuple[SuiteEntry, SuiteRun]], registry: Any, console: Console, jobs: int) -> Suite:
    import signal
    import threading

    def stop(signum: int, _frame: Any) -> None:  # a plain kill ends the runs under way too (finally, below)
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop) if threading.current_thread() is threading.main_thread() else None
    try:
        return _run_parallel(suite, todo, registry, console, jobs)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _run_parallel(suite: Suite, todo: list[tuple[SuiteEntry, SuiteRun]], registry: Any, console: Console, jobs: int) -> Suite:
    import os
    import subprocess
    import sys
    import tempfile
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from envengineer.fileio import write_json, write_text

    prepare_policies([run for _, run in todo], registry, console)
    console.print(f"suite: {len(todo)} run(s), {jobs} at a time, each in its own process; logs: {escape(str(suite.output))}/<config>/seed-<s>.log")
    scratch = Path(tempfile.mkdtemp(prefix="envengineer-suite-"))
    waiting = list(todo)
    running: dict[int, tuple[SuiteEntry, SuiteRun, Any, Path, Any]] = {}
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console)
    overall = progress.add_task(f"[bold]suite: {len(todo)} run(s)", total=len(todo))
    try:
        with progress:
            while waiting or running:
                while waiting and len(running) < jobs:
                    entry, run = waiting.pop(0)
                    index = len(todo) - len(waiting)
                    job, result = scratch / f"job-{index}.json", scratch / f"result-{index}.json"
                    log = _log_path(suite, entry, run)
                    verb = "resuming" if RunDir(run.run_dir).run_yaml.exists() else "starting"
                    log.parent.mkdir(parents=True, exist_ok=True)
                    with log.open("a", encoding="utf-8") as handle:
                        handle.write(f"\n===== {entry.stem} seed {run.seed}: {verb} ({time.strftime('%Y-%m-%d %H:%M:%S')}) =====\n")
                    write_json(job, {"config": run.config.model_dump(mode="json"), "log": str(log), "result": str(result)})
                    process = subprocess.Popen(
                        [sys.executable, "-m", "envengineer.suite_worker", str(job)],
                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ),
                    )
                    bar = progress.add_task(f"{escape(entry.stem)} seed {run.seed} ({verb})", total=run.config.rounds)
                    running[process.pid] = (entry, run, process, result, bar)
                for pid, (entry, run, process, result, bar) in list(running.items()):
                    history = _history(run)
                    rounds_done = sum(1 for line in history if line.get("step") == "round_end")
                    progress.update(bar, completed=rounds_done, description=f"{escape(entry.stem)} seed {run.seed}: {escape(_where(history))}")
                    code = process.poll()
                    if code is None:
                        continue
                    del running[pid]
                    progress.remove_task(bar)
                    outcome = _outcome(result, code, _log_path(suite, entry, run))
                    if outcome.get("ok"):
                        run.status, run.error = run_state(run.run_dir, run.config), None
                        console.print(f"[green]{escape(entry.stem)} seed {run.seed}: {escape(run.status)}[/]", highlight=False)
                    else:
                        run.status, run.error = FAILED, str(outcome.get("error"))
                        if outcome.get("traceback"):
                            write_text(suite.output / entry.stem / f"seed-{run.seed}.traceback.txt", str(outcome["traceback"]))
                        console.print(f"[bold red]{escape(entry.stem)} seed {run.seed} failed:[/] {escape(run.error)}", highlight=False)
                    _finished(suite, run)
                    progress.advance(overall)
                if running:
                    time.sleep(0.5)
    finally:
        for _entry, _run, process, _result, _bar in running.values():  # interrupted: the runs resume next time
            process.terminate()
        for _entry, _run, process, _result, _bar in running.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    return suite


def _outcome(result: Path, code: int, log: Path) -> dict[str, Any]:
    """What a worker reported, or why it reported nothing (killed, crashed before writing)."""
    try:
        outcome = json.loads(result.read_text(encoding="utf-8"))
        if isinstance(outcome, dict):
            return outcome
    except (OSError, ValueError):
        pass
    how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
    return {"ok": False, "error": f"the run's process ended ({how}) without reporting; see {log}"}


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
    """Write ``<output>/<table>.md`` and ``.csv`` atomically for every table and print them; then each
    table's arms in detail (:mod:`envengineer.suite_report`): ``<table>-arms.md``, its CSVs and plots,
    printing the tests with seeds as the unit."""
    from envengineer.compare import _registry, rich_tables, to_csv, to_markdown
    from envengineer.fileio import write_text
    from envengineer.suite_report import build, write_arms_report

    registry = registry if registry is not None else _registry()
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
