"""A suite's arms compared in detail: per-subset tables, paired tests against a baseline arm, plots.

For each table of a suite (:func:`envengineer.plugins.suite.tables.tables` groups the configs), from the
finished runs on disk:

- one table per evaluation set (the validation set, then each benchmark): for each arm the
  mean ± sd over seeds of the valid and optimal rate in every subset the set declares, its
  declared aggregate (MAPF: the paper's Sum) and the overall rates;
- paired tests against the baseline arm (the manifest's ``baseline``, else the arm named
  ``fixed``, else the only config whose engineer is ``fixed``): on the same instances of each
  set, how many the arm solves that the baseline does not (+) and the reverse (−), with the
  two-sided exact sign test (:func:`envengineer.components.metrics.sign_test`), per seed (arm seed s
  against baseline seed s) and pooled over the seeds (with Holm's adjustment across the arms);
- seeds as the unit (:mod:`envengineer.plugins.suite.arms.seeds`): each arm's per-seed values against the
  baseline's, by Welch's t test and an exact permutation test; the validation table also shows
  the valid rate averaged over the rounds and, where the runs recorded it, the sampled pass@1;
- how far each arm's generator configs are from the baseline's, per knob and round;
- plots (matplotlib, only when installed): the validation rates per round of every arm side by
  side, per group of the task's primary grouping, the sets' figures per arm, and each arm's
  config trajectory (every declared knob, per group, per round, per seed).

Everything task-specific is read through the declarations (:mod:`envengineer.plugins.report.drawn`): the
sets' subsets and aggregates, the task's groupings and its knob table.

This module writes the report, with its per-set, config-distance and training-signal tables;
the runs it reads are in :mod:`envengineer.plugins.suite.arms.runs`, the paired tests in
:mod:`envengineer.plugins.suite.arms.paired`, the seed-level tests in :mod:`envengineer.plugins.suite.arms.seeds`, the
plots in :mod:`envengineer.plugins.suite.arms.plots`. It never imports :mod:`envengineer.plugins.suite.tables`, which calls it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envengineer.plugins.report.compare import Column, Comparison, Stat, to_csv, to_markdown
from envengineer.plugins.report.drawn import BenchView
from envengineer.plugins.report.view import rate
from envengineer.plugins.suite.arms.runs import METRICS, VALIDATION, ArmRun, ArmsReport, as_number, config_values, json_records, knob_layout
from envengineer.plugins.suite.model import slug as _slug
from envengineer.plugins.suite.arms.paired import paired_tables
from envengineer.plugins.suite.arms.plots import write_plots
from envengineer.plugins.suite.arms.seeds import rich_table, seed_table as seed_tests, validation_figures


def _subset_rate(summary: Mapping[str, Any] | None, view: BenchView, subset: str, metric: str) -> float | None:
    value = rate(summary, f"{metric}_rate", view.subsets.name, subset) if view.subsets else None  # type: ignore[arg-type]
    return None if value is None else 100 * value


def set_table(report: ArmsReport, key: str, view: BenchView) -> Comparison:
    """Rows: arms; columns: valid and optimal per subset, the aggregate, overall; mean ± sd over seeds."""
    summaries = [r.sets[key].summary for a in report.arms for r in a.runs if key in r.sets]
    subsets = view.subset_keys(summaries) or (list(view.subsets.order) if view.subsets is not None else [])
    columns = [Column("arm", "arm", "", "arm", False), Column("seeds", "seeds", "", "seeds", False)]
    for subset in subsets:
        for metric in METRICS:
            columns.append(Column(f"{subset}:{metric}", f"{subset} {metric} %", subset, f"{metric} %"))
    if view.aggregate is not None:
        for metric in METRICS:
            columns.append(Column(f"agg:{metric}", f"{metric} {view.symbol}", view.aggregate.title, f"{metric} {view.symbol}"))
    for metric in METRICS:
        columns.append(Column(f"all:{metric}", f"overall {metric} %", "overall", f"{metric} %"))
    extras, extra_note = validation_figures(report) if key == VALIDATION else ([], "")
    columns += [column for column, _ in extras]
    rows = []
    for arm in report.arms:
        row: dict[str, Any] = {"arm": arm.label + (" (baseline)" if arm.baseline else ""), "seeds": f"{len(arm.runs)}/{arm.planned}"}
        results = [r.sets.get(key) for r in arm.runs]
        summaries = [res.summary if res else None for res in results]
        for metric in METRICS:
            for subset in subsets:
                row[f"{subset}:{metric}"] = Stat.of([_subset_rate(s, view, subset, metric) for s in summaries])
            if view.aggregate is not None:
                row[f"agg:{metric}"] = Stat.of([view.figure(s, metric) for s in summaries])
            overall = [rate(s, f"{metric}_rate") for s in summaries]
            row[f"all:{metric}"] = Stat.of([None if v is None else 100 * v for v in overall])
        for column, figure in extras:
            row[column.key] = Stat.of([figure(r) for r in arm.runs])
        rows.append(row)
    label = report.set_label(key, view)
    note = (f"{label}: mean ± sd (sample, n − 1) over the finished seeds, in percent. "
            + (f"{view.note()}. " if view.aggregate is not None else "")
            + ("From the last evaluated round." if key == VALIDATION else "From the last round that ran the benchmark.")
            + (f" {extra_note}" if extra_note else ""))
    return Comparison(columns, rows, note, over_seeds=True)


# ------------------------------------------------------------------ configs


@dataclass(frozen=True)
class Fine(Stat):
    """A mean ± sd shown with three significant digits (knob units: 0.05 is not 0.1)."""

    def __str__(self) -> str:
        return f"{self.mean:.3g}" if self.sd is None else f"{self.mean:.3g} ± {self.sd:.2g}"


def config_distance(a: Mapping[str, Mapping[str, Any]], b: Mapping[str, Mapping[str, Any]], knob: str, share: bool) -> float | None:
    """How far config ``a`` is from ``b`` in ``knob``: for a budget share, the total variation distance
    (half the summed absolute differences: the share of the budget that moved); else the mean absolute
    difference over the groups both have."""
    groups = [g for g in a if g in b]
    pairs = [(as_number((a[g] or {}).get(knob)), as_number((b[g] or {}).get(knob))) for g in groups]
    pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
    if not pairs:
        return None
    total = sum(abs(x - y) for x, y in pairs)
    return total / 2 if share else total / len(pairs)


def distance_table(report: ArmsReport) -> Comparison | None:
    """Rows: (arm, knob); columns: the round configs; each cell the mean ± sd over seeds of the
    distance to the baseline's config of the same seed and round."""
    layout = knob_layout(report)
    base = report.baseline
    if layout is None or base is None:
        return None
    shares = {k.name for k in getattr(report.generator, "knobs", ()) or () if getattr(k, "share", False)}
    base_configs = {r.seed: dict(config_values(r, layout)) for r in base.runs}
    labels = sorted({label for a in report.arms for r in a.runs for label, _ in config_values(r, layout)})
    if not labels:
        return None
    columns = [Column("arm", "arm", "", "arm", False), Column("knob", "knob", "", "knob", False)]
    columns += [Column(f"r:{label}", f"round {label}", "round", label) for label in labels]
    rows = []
    for arm in report.arms:
        if arm is base:
            continue
        per_run = [(r, dict(config_values(r, layout))) for r in arm.runs]
        for knob in layout.knobs:
            row: dict[str, Any] = {"arm": arm.label, "knob": knob + (" (share: budget moved)" if knob in shares else "")}
            for label in labels:
                values = []
                for run, configs in per_run:
                    theirs = base_configs.get(run.seed, {}).get(label)
                    ours = configs.get(label)
                    values.append(config_distance(ours, theirs, knob, knob in shares) if ours is not None and theirs is not None else None)
                scale = 100 if knob in shares else 1
                stat = Stat.of([None if v is None else scale * v for v in values])
                row[f"r:{label}"] = None if stat is None else Fine(stat.mean, stat.sd, stat.n)
            rows.append(row)
    note = (f"Distance of each arm's generator config from the baseline {base.label}'s, same seed and round (round NN's "
            "config is the one round NN trains on; the last is the one the last design step wrote). For a budget share: "
            "the share of the budget placed differently, in percent (total variation distance); for other knobs: the mean "
            "absolute difference over the groups, in the knob's units. Mean ± sd over seeds; 0 means the same config.")
    return Comparison(columns, rows, note, over_seeds=True)


#: What a round's training step recorded about the signal it trained on (history.jsonl, step "train").
SIGNAL = (("prompts_used", "prompts trained on"), ("steps", "optimizer steps"),
          ("signal_mixed", "prompts with mixed outcomes"), ("signal_success", "sampled success %"))
#: figures of the signal table that are rates: no total over rounds
_RATES = {"signal_success"}


def train_lines(run: ArmRun) -> dict[str, dict[str, Any]]:
    """Round label ("00", …) -> that round's ``train`` line of the run's history, with the round's
    training signal (``train/signal.json``: prompts with mixed outcomes, sampled success) beside it."""
    import json

    from envengineer.store.rundir import RunDir, Step

    folder = RunDir(run.view.path)
    lines = {f"{r['round']:02d}": dict(r) for r in json_records(folder.history_path)
             if r.get("step") == Step.TRAIN and isinstance(r.get("round"), int)}
    for line in lines.values():
        try:
            overall = json.loads(folder.signal(line["round"]).read_text(encoding="utf-8")).get("overall") or {}
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(overall.get("mixed"), int):
            line["signal_mixed"] = overall["mixed"]
        if isinstance(overall.get("success"), (int, float)):
            line["signal_success"] = 100 * overall["success"]
    return lines


def signal_table(report: ArmsReport) -> Comparison | None:
    """Rows: (arm, figure); columns: the rounds and their total. How much training signal each arm's
    environments gave at the same budget: a trainer that keeps only prompts with mixed outcomes
    (GRPO's prefilter) trains on fewer prompts, for fewer steps, where the data is all too hard or
    all too easy for the policy."""
    lines = {(arm.stem, run.seed): train_lines(run) for arm in report.arms for run in arm.runs}
    labels = sorted({label for rounds in lines.values() for label in rounds})
    present = [(key, title) for key, title in SIGNAL if any(key in r for rounds in lines.values() for r in rounds.values())]
    if not labels or not present:
        return None
    columns = [Column("arm", "arm", "", "arm", False), Column("figure", "figure", "", "figure", False)]
    columns += [Column(f"r:{label}", f"round {label}", "round", label) for label in labels]
    columns.append(Column("total", "total", "", "total"))
    rows = []
    for arm in report.arms:
        for key, title in present:
            row: dict[str, Any] = {"arm": arm.label + (" (baseline)" if arm.baseline else ""), "figure": title}
            per_seed = [lines[(arm.stem, run.seed)] for run in arm.runs]
            for label in labels:
                row[f"r:{label}"] = Stat.of([as_number(rounds.get(label, {}).get(key)) for rounds in per_seed])
            totals = [sum(as_number(r.get(key)) or 0 for r in rounds.values()) if rounds and key not in _RATES else None for rounds in per_seed]
            row["total"] = Stat.of(totals)
            rows.append(row)
    note = ("What each round trained on, from the trainer's own record (history.jsonl): the prompts it kept (a GRPO "
            "prefilter keeps those the policy solves sometimes: all-right and all-wrong groups carry no signal) and "
            "its optimizer steps; and from the round's training signal (train/signal.json), the prompts whose sampled "
            "outcomes were mixed (the ones GRPO learns from) and the share of sampled completions that were valid. Every "
            "arm generates the same number of instances a round; what it trains on depends on how well its environment "
            "matches the policy. Mean ± sd over seeds.")
    return Comparison(columns, rows, note, over_seeds=True)


# ------------------------------------------------------------------ writing


def write_arms_report(report: ArmsReport, output: Path, slug: str, console: Any = None) -> list[Path]:
    """``<slug>-arms.md`` (every table, the plots), a ``.csv`` per table, the plots in ``<slug>-plots/``;
    the seed-level tests also on ``console`` when given (the headline of the comparison)."""
    from envengineer.fileio import write_text

    written: list[Path] = []
    parts = [f"# {report.title}: arms compared\n",
             "Generated by `envengineer suite`; every figure comes from the run directories in this folder.\n"]
    if report.baseline is None:
        parts.append("No baseline arm (a manifest's `baseline`, an arm named `fixed`, or the only config with the "
                     "`fixed` engineer): no paired tests.\n")
    def add(heading: str, name: str, table: Comparison) -> None:
        """A table under its heading in the markdown, and as ``<slug>-<name>.csv`` beside it."""
        parts.extend([f"## {heading}\n", to_markdown(table)])
        csv_path = output / f"{slug}-{name}.csv"
        write_text(csv_path, to_csv(table))
        written.append(csv_path)

    for key, view in report.sets:
        add(report.set_label(key, view), _slug(view.name), set_table(report, key, view))
    tables = paired_tables(report)
    if tables is not None:
        pooled_table, seed_table = tables
        add(f"Paired against {report.baseline.label}: pooled over seeds", "paired", pooled_table)
        add(f"Paired against {report.baseline.label}: per seed", "paired-per-seed", seed_table)
    seeds = seed_tests(report)
    if seeds is not None:
        add(f"Against {report.baseline.label} with seeds as the unit", "seed-tests", seeds)
        if console is not None:
            console.print(rich_table(seeds, f"{report.title}: against {report.baseline.label} with seeds as the unit"))
    distances = distance_table(report)
    if distances is not None:
        add(f"Configs against {report.baseline.label}'s", "config-distance", distances)
    signal = signal_table(report)
    if signal is not None:
        add("Training signal at the same budget", "signal", signal)
    images, problem = write_plots(report, output / f"{slug}-plots")
    if images:
        parts.append("## Plots\n")
        parts += [f"![{image.stem}]({image.parent.name}/{image.name})\n" for image in images]
    if problem:
        parts.append(f"Plots skipped: {problem}\n")
    md = output / f"{slug}-arms.md"
    write_text(md, "\n".join(parts))
    return [md, *written, *images]
