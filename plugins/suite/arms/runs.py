"""The arms of one suite table as the arms report reads them from disk: each arm's finished runs,
each run's figures and verdicts on every evaluation set, and the generator configs of its rounds.

The bottom of the report's modules: :mod:`envengineer.plugins.suite.arms.seeds`, :mod:`envengineer.plugins.suite.arms.paired`,
:mod:`envengineer.plugins.suite.arms.plots` and :mod:`envengineer.plugins.suite.arms.page` read these objects; this module
imports none of them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envengineer.plugins.report.drawn import BenchView, KnobLayout
from envengineer.plugins.report.view import RunView, load_run_view
from envengineer.plugins.suite.model import bench_views

#: The report's key for the validation set (its other sets are keyed by benchmark name).
VALIDATION = "validation"
METRICS = ("valid", "optimal")


# ------------------------------------------------------------------ what a run holds


@dataclass
class SetResult:
    """One run's figures on one evaluation set: its summary and its verdicts by instance id."""

    summary: dict[str, Any] | None
    verdicts: dict[str, dict[str, bool]] = field(default_factory=dict)  # id -> {"valid": .., "optimal": ..}
    stage: str | None = None  # the stage it came from ("03", "base")


@dataclass
class ArmRun:
    """A finished run of an arm at one seed, as the comparison reads it."""

    seed: int
    view: RunView
    sets: dict[str, SetResult]  # set name ("validation" key for the validation set) -> result


def json_records(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, skipping lines that are not one ([] without the file)."""
    out: list[dict[str, Any]] = []
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def read_verdicts(path: Path) -> dict[str, dict[str, bool]]:
    """``{id: {"valid": bool, "optimal": bool}}`` of a ``verdicts.jsonl`` ({} without one)."""
    return {str(r["id"]): {m: bool(r.get(m)) for m in METRICS} for r in json_records(path) if "id" in r}


def arm_run(run_dir: Path, seed: int, benchmarks: Sequence[str], registry: Any) -> ArmRun:
    """The validation figures of the last evaluated stage and each benchmark's of the last stage
    that ran it (as :func:`envengineer.plugins.report.compare.run_figures` takes them), with their verdicts."""
    from envengineer.store.rundir import RunDir

    view = load_run_view(run_dir, registry)
    folder = RunDir(view.path)
    sets: dict[str, SetResult] = {}
    val = view.last_eval()
    sets[VALIDATION] = SetResult(
        val.eval if val else None, read_verdicts(folder.eval_verdicts(val.index)) if val else {}, val.label if val else None,
    )
    for name in benchmarks:
        stage = view.last_bench(name)
        sets[name] = SetResult(
            stage.bench[name] if stage else None,
            read_verdicts(folder.bench_dir(stage.index, name) / "verdicts.jsonl") if stage else {},
            stage.label if stage else None,
        )
    return ArmRun(seed, view, sets)


# ------------------------------------------------------------------ the comparison


@dataclass
class Arm:
    """One row: an arm (or config) and its finished runs."""

    label: str
    stem: str
    runs: list[ArmRun]
    planned: int
    baseline: bool = False


@dataclass
class ArmsReport:
    title: str
    arms: list[Arm]
    sets: list[tuple[str, BenchView]]  # (key, view); key "validation" for the validation set
    baseline: Arm | None
    generator: Any = None  # the task's, for its groupings and knobs (None when not installed)

    def set_label(self, key: str, view: BenchView) -> str:
        return f"validation ({view.name})" if key == VALIDATION else view.label if view.label == view.name else f"{view.label} ({view.name})"


def choose_baseline(entries: Sequence[Any]) -> Any:
    """The entry flagged as baseline; else the only one whose engineer is ``fixed``; else None."""
    flagged = [e for e in entries if getattr(e, "baseline", False)]
    if flagged:
        return flagged[0]
    fixed = [e for e in entries if (e.config.engineer or {}).get("name") == "fixed"]
    return fixed[0] if len(fixed) == 1 else None


def build(title: str, entries: Sequence[Any], registry: Any) -> ArmsReport:
    """The comparison of ``entries`` (suite entries of one table) from their finished runs."""
    from envengineer.loop.runconfig import validation_set

    benchmarks = list(dict.fromkeys(b for e in entries for b in e.config.eval.benchmarks))
    validations = [v for v in dict.fromkeys(validation_set(e.config, registry) for e in entries) if v]
    views = bench_views(validations[:1] + benchmarks, registry)
    sets: list[tuple[str, BenchView]] = []
    if validations:
        sets.append((VALIDATION, views[0]))
    sets += [(v.name, v) for v in views[len(validations[:1]):]]
    base_entry = choose_baseline(entries)
    arms = []
    for entry in sorted(entries, key=lambda e: (e.order, e.stem)):
        runs = [arm_run(run.run_dir, run.seed, benchmarks, registry) for run in entry.runs if run.done]
        arms.append(Arm(entry.row, entry.stem, runs, len(entry.runs), entry is base_entry))
    generator = next((r.view.generator for a in arms for r in a.runs if r.view.generator is not None), None)
    return ArmsReport(title, arms, sets, next((a for a in arms if a.baseline), None), generator)


# ------------------------------------------------------------------ configs


def knob_layout(report: ArmsReport) -> KnobLayout | None:
    """The knobs of the arms' round configs: as the task declares them, else as the configs show
    them (:func:`envengineer.plugins.report.drawn.knob_layout`)."""
    from envengineer.plugins.report.drawn import knob_layout as layout_of

    configs = [s.config for a in report.arms for r in a.runs for s in r.view.rounds]
    return layout_of(report.generator, configs)


def config_values(run: ArmRun, layout: KnobLayout) -> list[tuple[str, dict[str, dict[str, Any]]]]:
    """(round label, {group: {knob: value}}) of every round config the run holds."""
    return [(s.label, values) for s in run.view.rounds if (values := layout.values(s.config)) is not None]


def as_number(value: Any) -> float | None:
    """A config value or a recorded figure as a float; None for anything else (a bool too)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
