"""Running a suite's unfinished runs on this machine (``--launcher local``): one after the other in
this process, or ``jobs`` at a time, each in its own process (:mod:`envengineer.plugins.suite.worker`),
after the shared starting policies are prepared once. A run that raises is recorded in the suite's
status file and the others go on. On a cluster: :mod:`envengineer.plugins.suite.launch.jobs`."""

from __future__ import annotations

import json
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape

from envengineer.display import Console
from envengineer.errors import EnvEngineerError
from envengineer.store.rundir import RunDir, Step
from envengineer.plugins.suite.model import FAILED, PARTIAL, Suite, SuiteEntry, SuiteRun, save_errors
from envengineer.plugins.suite.plan import run_state


def unfinished(suite: Suite) -> list[tuple[SuiteEntry, SuiteRun]]:
    """The unfinished runs, seed by seed (every config's seed 0 first): a suite stopped half-way
    holds whole seeds to compare."""
    todo = [(entry, run) for entry in suite.entries for run in entry.runs if not run.done and run.same_as is None]
    return sorted(todo, key=lambda item: item[1].seed)  # stable: configs in their order within a seed


def finished(suite: Suite, run: SuiteRun) -> None:
    """Record how a run ended (and the rows that show the same run), in the status file."""
    for shared in (r for r in suite.runs if r.same_as is not None and r.run_dir == run.run_dir):
        shared.status, shared.error = run.status, run.error
    save_errors(suite)


def execute(suite: Suite, *, registry: Any = None, console: Console | None = None, jobs: int = 1) -> Suite:
    """Run every unfinished run, record failures. ``jobs`` 1: one after the other in this process
    (GPU configs: never two at once); more: that many at a time, each in its own process
    (:mod:`envengineer.plugins.suite.worker`), after the starting policies are prepared here, once each."""
    from envengineer.display import progress_bar
    from envengineer.loop.steps import Loop
    from envengineer.registry import load_registry
    from envengineer.loop.runconfig import resolve

    if jobs < 1:
        raise EnvEngineerError(f"--jobs {jobs}: give at least one")
    console = console or Console()
    registry = registry or load_registry()
    todo = unfinished(suite)
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
                run.status, run.error = run_state(run.run_dir, run.config, registry), None
            finished(suite, run)
            advance()
    return suite


def prepare_policies(runs: Sequence[SuiteRun], registry: Any, console: Console) -> None:
    """Prepare each distinct starting policy of ``runs`` once, here (the tiny policy's warm start is
    built and cached), so that parallel runs find it ready instead of building it side by side.
    A policy that cannot be prepared is left to its runs, which then fail with the error."""
    from envengineer.display import stage_progress
    from envengineer.loop.runconfig import resolve

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


def history_so_far(run: SuiteRun) -> list[dict[str, Any]]:
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

    from envengineer.fileio import write_json
    from envengineer.processes import end_groups, start

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
                    write_json(job, {"config": run.config.model_dump(mode="json"), "log": str(log), "result": str(result),
                                     # the suite's table and row (excluded from a config's dump): trackers label runs by them
                                     "suite": run.config.suite.model_dump(mode="json") if run.config.suite else None})
                    process = start(  # a process group of its own: what the run starts ends with it
                        [sys.executable, "-m", "envengineer.plugins.suite.worker", str(job)],
                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ),
                    )
                    bar = progress.add_task(f"{escape(entry.stem)} seed {run.seed} ({verb})", total=run.config.rounds)
                    running[process.pid] = (entry, run, process, result, bar)
                for pid, (entry, run, process, result, bar) in list(running.items()):
                    history = history_so_far(run)
                    rounds_done = sum(1 for line in history if line.get("step") == Step.ROUND_END)
                    progress.update(bar, completed=rounds_done, description=f"{escape(entry.stem)} seed {run.seed}: {escape(_where(history))}")
                    code = process.poll()
                    if code is None:
                        continue
                    del running[pid]
                    progress.remove_task(bar)
                    log = _log_path(suite, entry, run)
                    record_outcome(suite, entry, run, _outcome(result, code, log), console, log)
                    progress.advance(overall)
                if running:
                    time.sleep(0.5)
    finally:
        # interrupted: the runs resume next time; each run's whole process group ends (its trainer's or
        # engine's children too), SIGKILL to what is left after the grace period
        end_groups([process for _entry, _run, process, _result, _bar in running.values()], grace_s=30)
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    return suite


#: lines of a failed run's log shown with its error
TAIL_LINES = 20


def record_outcome(suite: Suite, entry: SuiteEntry, run: SuiteRun, outcome: dict[str, Any], console: Console, log: Path) -> None:
    """Record how a run in a process of its own ended: its folder's state, or the error it reported
    (its traceback beside its log, and the log's last lines shown under the error)."""
    from envengineer.fileio import write_text

    if outcome.get("ok"):
        run.status, run.error = run_state(run.run_dir, run.config), None
        console.print(f"[green]{escape(entry.stem)} seed {run.seed}: {escape(run.status)}[/]", highlight=False)
    else:
        run.status, run.error = FAILED, str(outcome.get("error"))
        if outcome.get("traceback"):
            write_text(suite.output / entry.stem / f"seed-{run.seed}.traceback.txt", str(outcome["traceback"]))
        console.print(f"[bold red]{escape(entry.stem)} seed {run.seed} failed:[/] {escape(run.error)}\n"
                      f"[dim]{escape(str(log))}, last lines:[/]\n{escape(log_tail(log))}", highlight=False)
    finished(suite, run)


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


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
