"""What a suite is: its configs (entries) and their runs, the state each run is in, and the
suite's bookkeeping file; with the helpers the suite and its report share (:func:`slug`,
:func:`bench_views`).

Every other ``suite*`` module imports from here and nothing here imports them:
:mod:`envengineer.plugins.suite.manifest` reads configs and manifests into entries,
:mod:`envengineer.plugins.suite.plan` plans their runs, :mod:`envengineer.plugins.suite.local` runs them,
:mod:`envengineer.plugins.suite.arms.page` compares the arms, and :mod:`envengineer.plugins.suite.tables` writes the tables.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envengineer.plugins.report.drawn import BenchView
from envengineer.errors import InputError
from envengineer.loop.runconfig import RunConfig

#: Suite bookkeeping in the output folder: the last error of every run that raised, and the cluster
#: jobs submitted and still to be followed.
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
    """One config: one row of one table (a config file, or one arm of a manifest)."""

    path: Path  # the config file, or the manifest that names the arm
    config: RunConfig
    runs: list[SuiteRun] = field(default_factory=list)
    arm: str | None = None  # the arm's name (its run folder); None for a config file
    base: Path | None = None  # an arm's base config
    overrides: tuple[str, ...] = ()  # an arm's overrides of its base, as `envengineer run` takes them
    baseline: bool = False  # the arm the suite's paired tests compare the others against
    launcher: dict[str, Any] | None = None  # its manifest's `launcher:` section (how a cluster runs it)
    seeds: tuple[int, ...] | None = None  # its manifest's `seeds:` (the seeds run when --seeds is not given)
    seed_configs: dict[int, RunConfig] = field(default_factory=dict)  # the config of a seed with overrides of its own
    seed_overrides: dict[int, tuple[str, ...]] = field(default_factory=dict)  # a `seeds:` mapping: each seed's overrides (maybe none)

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


# ------------------------------------------------------------------ the status file


def _read_status(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: unreadable suite status ({exc}); delete it to forget recorded failures and submitted jobs") from None
    return data if isinstance(data, dict) else {}


def read_errors(path: Path) -> dict[str, str]:
    """The last error of each run that raised, by :func:`run_key` ({} without the file)."""
    errors = _read_status(path).get("errors")
    return {str(k): str(v) for k, v in errors.items()} if isinstance(errors, dict) else {}


def read_jobs(path: Path) -> dict[str, dict[str, Any]]:
    """The cluster jobs submitted and not yet seen to end, by :func:`run_key`: ``{"launcher": "slurm",
    "id": "1234", ...}`` ({} without the file)."""
    jobs = _read_status(path).get("jobs")
    return {str(k): dict(v) for k, v in jobs.items() if isinstance(v, dict)} if isinstance(jobs, dict) else {}


def run_key(output: Path, run: SuiteRun) -> str:
    """The run's key in the status file: its folder relative to the suite output (``arm/seed-0``)."""
    return run.run_dir.relative_to(output).as_posix()


def _write_status(path: Path, errors: dict[str, str], jobs: dict[str, dict[str, Any]]) -> None:
    from envengineer.fileio import write_json

    data: dict[str, Any] = {"errors": dict(sorted(errors.items()))}
    if jobs:
        data["jobs"] = dict(sorted(jobs.items()))
    write_json(path, data)


def save_errors(suite: Suite) -> None:
    """Record the suite's runs' errors in the status file (a run that finished since: forgotten)."""
    path = suite.output / STATUS_FILE
    errors = read_errors(path)  # runs left out by --only keep theirs
    for run in (r for r in suite.runs if r.same_as is None):
        errors.pop(run_key(suite.output, run), None)
        if run.error and not run.done:
            errors[run_key(suite.output, run)] = run.error
    _write_status(path, errors, read_jobs(path))


def save_jobs(output: Path, changes: dict[str, dict[str, Any] | None]) -> None:
    """Record submitted jobs by run key (None: the job has ended and is forgotten)."""
    path = output / STATUS_FILE
    jobs = read_jobs(path)
    for key, job in changes.items():
        if job is None:
            jobs.pop(key, None)
        else:
            jobs[key] = job
    _write_status(path, read_errors(path), jobs)


# ------------------------------------------------------------------ shared with the report


def bench_views(names: Sequence[str], registry: Any) -> list[BenchView]:
    """The configs' benchmarks as their tasks declare them (label: the benchmark's name, as
    ``envengineer bench list`` shows it), in the configs' order."""
    known = set(registry.names("benchmark")) if registry is not None else set()
    return [BenchView.of(n, registry.benchmark(n) if n in known else None) for n in names]


def slug(title: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", title).strip("-").lower() or "table"
