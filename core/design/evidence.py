"""What an engineer may read for one design step.

:class:`Evidence` gathers one finished round (config, validation summary, failing examples,
training details) and the rounds before it; context modules (F, G, H, S, T) each render a
block of markdown from it (:mod:`envengineer.design.context`). :func:`load_evidence` rebuilds the
evidence of a recorded round from a run directory, read through
:class:`~envengineer.store.rundir.RunDir`, so any engineer can be replayed on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError, InputError
from envengineer.fileio import read_json, read_jsonl
from envengineer.store.rundir import RunDir

# ---------------------------------------------------------------------- evidence


@dataclass
class RoundRecord:
    """One finished round, as the H module shows it."""

    round: int
    config: dict[str, Any]
    report: dict[str, Any]
    fallback: bool = False
    signal: dict[str, Any] = field(default_factory=dict)  # the round's training signal ({} when none was recorded)


@dataclass
class Evidence:
    """Everything a context module may read for one design step."""

    task: Any  # the task's Generator component
    round: int  # the round just finished (0-based)
    rounds_total: int
    config: dict[str, Any]  # C_n, the config that produced this round's training set
    report: dict[str, Any]  # this round's validation Summary.to_dict()
    failure_types: tuple[str, ...] = ()
    examples: list[dict[str, Any]] = field(default_factory=list)
    history: list[RoundRecord] = field(default_factory=list)  # earlier rounds, oldest first
    summaries: list[str] = field(default_factory=list)  # S notes of earlier rounds, latest last
    training: dict[str, Any] = field(default_factory=dict)  # {"full": {...}, "bookkeeping": {...}}
    budget: int = 0
    #: the round's training signal (:mod:`envengineer.loop.signal`): sampled success on its own training
    #: prompts, overall and per group of each grouping; {} when the trainer recorded none
    signal: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None  # the run's seed (run.yaml), None when it recorded none
    #: the starting policy's validation summary (the base evaluation, before any training; the
    #: same shape as ``report``), {} when the run has none
    base_report: dict[str, Any] = field(default_factory=dict)


def task_from_run(run: dict[str, Any], registry: Any) -> Any:
    """The generator component of a run config's ``task:`` section."""
    section = dict(run.get("task") or {})
    name = section.get("name")
    if not name:
        raise ConfigError("task.name: field required")
    cls = registry.get("generator", name)
    if "name" not in cls.Options.model_fields:
        section.pop("name", None)
    return registry.create("generator", name, section, where="task")


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


def _was_fallback(run: RunDir, round: int) -> bool:
    """Round ``round``'s config was kept by a fallback of the design step before it."""
    if round <= 0:
        return False
    from envengineer.fileio import read_yaml

    path = run.projection(round - 1)
    if not path.exists():
        return False
    data = read_yaml(path)
    return bool(isinstance(data, dict) and data.get("fallback"))


def load_signal(run: RunDir, round: int) -> dict[str, Any]:
    """Round ``round``'s aggregated training signal (``train/signal.json``), {} when it has none."""
    path = run.signal(round)
    if not path.exists():
        return {}
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object")
    return data


def round_failures(run_dir: str | Path | RunDir, round: int) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """Round ``round``'s failure evidence in a run directory: its validation summary, failing examples ([] when
    none were recorded) and training signal ({} when none); a missing or unreadable summary is an InputError."""
    folder = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    examples_path = folder.eval_examples(round)
    examples = read_jsonl(examples_path) if examples_path.exists() else []
    return read_json(folder.eval_summary(round)), examples, load_signal(folder, round)


def load_evidence(run_dir: str | Path, round: int, registry: Any, *, max_examples: int | None = None) -> Evidence:
    """The evidence of recorded round ``round`` of the run in ``run_dir`` (layout: docs/context.md)."""
    from envengineer.fileio import read_yaml

    run_dir_ = RunDir(run_dir)
    run = read_yaml(run_dir_.run_yaml)
    if not isinstance(run, dict):
        raise InputError(f"{run_dir_.run_yaml}: expected a mapping")
    task = task_from_run(run, registry)
    try:
        failure_types = tuple(registry.get("validator", task.name).failure_types)
    except Exception:
        failure_types = ()

    def config_of(n: int) -> dict[str, Any]:
        data = read_yaml(run_dir_.config_path(n))
        if not isinstance(data, dict):
            raise InputError(f"{run_dir_.config_path(n)}: expected a mapping")
        return data

    if not run_dir_.round_dir(round).is_dir():
        raise InputError(f"{run_dir_.round_dir(round)}: no such round directory")
    history = [
        RoundRecord(round=n, config=config_of(n), report=read_json(run_dir_.eval_summary(n)), fallback=_was_fallback(run_dir_, n),
                    signal=load_signal(run_dir_, n))
        for n in range(round)
    ]
    summaries = [note for n in range(round) if (note := _read_text(run_dir_.summary_note(n))) is not None]
    report, examples, signal = round_failures(run_dir_, round)
    if max_examples is not None:
        examples = examples[:max_examples]
    details_path = run_dir_.train_details(round)
    training = read_json(details_path) if details_path.exists() else {}
    budget = int(run.get("budget") or 0)
    rounds_total = int(run.get("rounds") or round + 1)
    training.setdefault("bookkeeping", {"round": round, "rounds_total": rounds_total})
    return Evidence(
        task=task,
        round=round,
        rounds_total=rounds_total,
        config=config_of(round),
        report=report,
        failure_types=failure_types,
        examples=examples,
        history=history,
        summaries=summaries,
        training=training,
        budget=budget,
        signal=signal,
        seed=run.get("seed") if isinstance(run.get("seed"), int) else None,
        base_report=read_json(run_dir_.eval_summary(None)) if run_dir_.eval_summary(None).exists() else {},
    )
