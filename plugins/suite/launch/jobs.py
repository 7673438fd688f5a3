"""Running a suite's runs on a cluster (``envengineer suite --launcher ray|slurm``), and the status
of every run (``--status``).

A launcher puts one run (a config at a seed) on the cluster as one job, with the resources the run
asks for (:func:`run_resources`), and says whether a job it submitted is pending, running or over:
:class:`Launcher`, with :mod:`envengineer.plugins.suite.launch.ray` and :mod:`envengineer.plugins.suite.launch.slurm`
(each imports its library only when used). Everything else is here and the same for both:

- the job runs :mod:`envengineer.plugins.suite.worker` on the node, the same resumable loop as ``envengineer
  run``; its files sit beside the run directory on the shared storage (``<config>/seed-<s>.job.json``,
  ``.log``, ``.result.json``, ``.node.json``), and the run directory decides what is finished;
- each job's id is kept in the suite's status file (``suite.json``) until the suite sees it end, so
  that the command run again after a crash follows the jobs still pending or running and submits
  only the runs that have none;
- while it follows them, one status line per run (pending, running on which node, round k of n,
  done, failed) in a live table; a failed run is reported with its log's tail.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape

from envengineer.display import Console
from envengineer.components import Resources
from envengineer.errors import EnvEngineerError
from envengineer.plugins.suite.launch.base import ENDED, PENDING, RUNNING, UNKNOWN, Job, Launcher, LauncherOptions
from envengineer.store.rundir import RunDir, Step
from envengineer.plugins.suite.model import FAILED, FINISHED, PARTIAL, STATUS_FILE, Suite, SuiteEntry, SuiteRun, read_jobs, run_key, save_jobs
from envengineer.plugins.suite.local import history_so_far, prepare_policies, record_outcome, unfinished

def make_launcher(options: LauncherOptions, output: Path, saved: dict[str, dict[str, Any]] | None = None, *, start: bool = True) -> Launcher:
    """The launcher ``options`` name; ``saved`` (the status file's jobs) fills in what finds earlier jobs
    again. ``start`` False: only reach a cluster that is there (``--status`` starts nothing)."""
    if options.name == "ray":
        from envengineer.plugins.suite.launch.ray import RayLauncher

        address = options.address or next((job.get("address") for job in (saved or {}).values() if job.get("launcher") == "ray" and job.get("address")), None)
        return RayLauncher(options.model_copy(update={"address": address}), start=start)
    if options.name == "slurm":
        from envengineer.plugins.suite.launch.slurm import SlurmLauncher

        return SlurmLauncher(options, output)
    raise EnvEngineerError(f"--launcher {options.name}: runs on this machine (--jobs N); no jobs to follow")


def run_resources(run: SuiteRun, registry: Any, options: LauncherOptions) -> Resources:
    """What the run asks for: its trainer's and policy's resources, with the launcher's ``gpus_per_node``
    and ``cpus`` on top. A run on several nodes gets a Ray cluster over them (docs/cluster.md); submitit's
    local executor, one machine, refuses it."""
    from envengineer.loop.runconfig import resolve

    resolved = resolve(run.config, registry)
    need = resolved.trainer.resources().union(resolved.policy.resources())
    need = Resources(options.gpus_per_node if options.gpus_per_node is not None else need.gpus_per_node, need.nodes,
                     options.cpus if options.cpus is not None else need.cpus)
    if need.nodes > 1 and options.name == "slurm" and options.executor == "local":
        raise EnvEngineerError(
            f"{run.run_dir}: the run trains on {need.nodes} nodes; launcher.executor: local runs every job on this machine. "
            "Submit it to Slurm (executor: slurm) or run it on a Ray cluster (--launcher ray)")
    return need


# ------------------------------------------------------------------ submitting and following


def execute_on_cluster(suite: Suite, options: LauncherOptions, *, registry: Any = None, console: Console | None = None) -> Suite:
    """Submit the unfinished runs that have no job pending or running, follow them all until each
    has ended, and record how each ended. Interrupted (Ctrl-C), the jobs go on; the same command
    follows them again."""
    from envengineer.registry import load_registry

    console = console or Console()
    registry = registry or load_registry()
    saved = read_jobs(suite.output / STATUS_FILE)
    done = [run_key(suite.output, run) for run in suite.runs if run.done and run.same_as is None]
    if done:
        console.print(f"[dim]{len(done)} finished run(s) skipped[/]")
    todo = unfinished(suite)
    ended = {key: saved[key] for key in done if key in saved}  # finished while no suite followed them
    if not todo and not ended:
        return suite
    launcher = make_launcher(options, suite.output, saved)
    try:
        for key, record in ended.items():
            if record.get("launcher") == launcher.name:
                launcher.release(str(record.get("id")))
        save_jobs(suite.output, {key: None for key in ended})
        if not todo:
            return suite
        jobs, ids = submit(suite, todo, launcher, options, registry=registry, console=console)
        _follow(suite, jobs, ids, launcher, console, options.poll_seconds)
    finally:
        launcher.close()
    return suite


def submit(suite: Suite, todo: Sequence[tuple[SuiteEntry, SuiteRun]], launcher: Launcher, options: LauncherOptions, *,
           registry: Any, console: Console) -> tuple[dict[str, Job], dict[str, str]]:
    """Submit the runs of ``todo`` that have no job of ``launcher`` pending or running (those are
    followed, not submitted twice); record the new job ids. The jobs to follow and their ids, by run key."""
    from envengineer.fileio import write_json

    saved = read_jobs(suite.output / STATUS_FILE)
    suite.output.mkdir(parents=True, exist_ok=True)
    jobs = {key: Job(entry, run, key, Resources()) for entry, run in todo for key in [run_key(suite.output, run)]}
    following: dict[str, str] = {}
    for key, job in jobs.items():
        record = saved.get(key)
        if record is None:
            continue
        if record.get("launcher") != launcher.name:
            console.print(f"[yellow]{escape(key)}: job {escape(str(record.get('id')))} was submitted with --launcher "
                          f"{escape(str(record.get('launcher')))}; it is not followed from here[/]", highlight=False)
            continue
        if launcher.state(str(record["id"])) != ENDED or job.file(".result.json").exists():
            following[key] = str(record["id"])  # pending, running, or over with its outcome waiting
    todo_jobs = [job for key, job in jobs.items() if key not in following]
    if following:
        console.print(f"following {len(following)} job(s) submitted earlier: {', '.join(sorted(following.values()))}", highlight=False)
    if todo_jobs:
        for job in todo_jobs:
            job.resources = run_resources(job.run, registry, options)
        for problem in dict.fromkeys(filter(None, (launcher.fits(job.resources) for job in todo_jobs))):
            console.print(f"[yellow]{escape(problem)}[/]", highlight=False)
        prepare_policies([job.run for job in todo_jobs], registry, console)
        for job in todo_jobs:
            for suffix in (".result.json", ".node.json"):
                job.file(suffix).unlink(missing_ok=True)
            verb = "resuming" if RunDir(job.run.run_dir).run_yaml.exists() else "starting"
            log = job.file(".log")
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("a", encoding="utf-8") as handle:
                handle.write(f"\n===== {job.name}: {verb} on {launcher.name} ({time.strftime('%Y-%m-%d %H:%M:%S')}) =====\n")
            write_json(job.file(".job.json"), {
                "config": job.run.config.model_dump(mode="json"), "log": str(log), "result": str(job.file(".result.json")),
                "where": str(job.file(".node.json")), "env": launcher.job_env(job.resources),
                "cwd": str(Path.cwd()),  # the config's relative paths (model, output, caches) as they read here
                # the suite's table and row (excluded from a config's dump): trackers label runs by them
                "suite": job.run.config.suite.model_dump(mode="json") if job.run.config.suite else None,
            })
        groups: dict[Resources, list[Job]] = {}
        for job in todo_jobs:
            groups.setdefault(job.resources, []).append(job)
        for group in groups.values():  # each group's ids saved as soon as it is in: a failure later submits no run twice
            ids = launcher.submit(group)
            extra = launcher.record()
            save_jobs(suite.output, {job.key: {"launcher": launcher.name, "id": job_id, **extra} for job, job_id in zip(group, ids)})
            following.update({job.key: job_id for job, job_id in zip(group, ids)})
        console.print(f"submitted {len(todo_jobs)} run(s) with --launcher {launcher.name}; logs: "
                      f"{escape(str(suite.output))}/<config>/seed-<s>.log", highlight=False)
    return {key: jobs[key] for key in following}, following


def _follow(suite: Suite, jobs: dict[str, Job], ids: dict[str, str], launcher: Launcher, console: Console, every: float) -> None:
    from rich.live import Live

    states = {key: PENDING for key in jobs}
    try:
        with Live(status_table(suite, ids, states), console=console, refresh_per_second=2, transient=False) as live:
            while any(state != ENDED for state in states.values()):
                for key, job in jobs.items():
                    if states[key] == ENDED:
                        continue
                    state = launcher.state(ids[key])
                    if state == ENDED or (state != PENDING and job.file(".result.json").exists()):
                        _ended(suite, job, ids[key], launcher, console)
                        state = ENDED
                    elif state != states[key] and not console.is_terminal:  # a log file: each change on a line of its own
                        node = _node(job.run)
                        console.print(f"{escape(job.entry.stem)} seed {job.run.seed}: {state}" + (f" on {escape(node)}" if state == RUNNING and node else ""),
                                      highlight=False)
                    states[key] = state
                live.update(status_table(suite, ids, states))
                if any(state != ENDED for state in states.values()):
                    time.sleep(every)
    except KeyboardInterrupt:
        console.print(f"[yellow]stopped following; the jobs go on ({launcher.name}). Run the same command again to follow them, "
                      "or with --status to see where they are.[/]")
        raise SystemExit(130) from None


def _ended(suite: Suite, job: Job, job_id: str, launcher: Launcher, console: Console) -> None:
    """Record how a job ended (what its worker reported, else why it reported nothing), forget its id, free it."""
    try:
        outcome = json.loads(job.file(".result.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        outcome = {"ok": False, "error": f"job {job_id} ended without reporting (killed, out of time or memory, or the node failed)"}
    record_outcome(suite, job.entry, job.run, outcome, console, job.file(".log"))
    save_jobs(suite.output, {job.key: None})
    launcher.release(job_id)


# ------------------------------------------------------------------ one status line per run


def _rounds(run: SuiteRun) -> int:
    return sum(1 for line in history_so_far(run) if line.get("step") == Step.ROUND_END)


def _node(run: SuiteRun) -> str:
    try:
        return str(json.loads((run.run_dir.parent / f"{run.run_dir.name}.node.json").read_text(encoding="utf-8")).get("host", ""))
    except (OSError, ValueError):
        return ""


def status_table(suite: Suite, ids: dict[str, str], states: dict[str, str]) -> Any:
    """One line per run: its state (done, pending, running on a node, failed, partial, not run), the
    round it is at and its job. ``ids``/``states``: the jobs followed and what their launcher says."""
    from rich.table import Table

    table = Table(title=f"suite: {len(suite.runs)} run(s) in {suite.output}", title_justify="left")
    for column in ("config", "seed", "state", "node", "round", "job"):
        table.add_column(column)
    for entry in suite.entries:
        for run in entry.runs:
            key = run_key(suite.output, run)
            done, rounds = _rounds(run), run.config.rounds
            job, state = ids.get(key, ""), states.get(key)
            if run.same_as:
                label, progress = f"[dim]the run of {escape(run.same_as)}[/]", ""
            elif run.status == FINISHED:
                label, progress = "[green]done[/]", f"{rounds} of {rounds}"
            elif state == RUNNING or (state in (UNKNOWN, None) and job and _node(run)):
                label, progress = "[cyan]running[/]" if state == RUNNING else "submitted (running?)", f"{min(done + 1, rounds)} of {rounds}"
            elif state in (PENDING, UNKNOWN) or (state is None and job):
                label, progress = "pending" if state == PENDING else "submitted", f"{done} of {rounds} done"
            elif run.status == FAILED:
                label, progress = f"[red]failed: {escape((run.error or '').splitlines()[0] if run.error else '')}[/]", f"{done} of {rounds} done"
            elif run.status == PARTIAL:
                label, progress = "[yellow]partial[/]", f"{done} of {rounds} done"
            else:
                label, progress = escape(run.status), ""
            node = _node(run) if job or run.status != FINISHED else ""
            table.add_row(escape(entry.stem), str(run.seed), label, escape(node), progress, escape(job))
    return table


def print_status(suite: Suite, options: LauncherOptions, console: Console) -> None:
    """``envengineer suite DIR --status``: every run's line from the run directories and the saved job
    ids, asking the jobs' launcher where they are when it can be reached (nothing is submitted)."""
    saved = read_jobs(suite.output / STATUS_FILE)
    ids = {key: str(job.get("id")) for key, job in saved.items()}
    states: dict[str, str] = {}
    by_launcher: dict[str, list[str]] = {}
    for key, job in saved.items():
        by_launcher.setdefault(str(job.get("launcher")), []).append(key)
    for name, keys in by_launcher.items():
        try:
            launcher = make_launcher(options.model_copy(update={"name": name}), suite.output, {k: saved[k] for k in keys}, start=False)
        except Exception as exc:  # noqa: BLE001 - the lines still show what the run directories say
            console.print(f"[yellow]cannot ask {escape(name)} about its jobs ({escape(str(exc))}); states from the run directories[/]", highlight=False)
            continue
        try:
            states.update({key: launcher.state(ids[key]) for key in keys})
        finally:
            launcher.close()
    console.print(status_table(suite, ids, states))
