"""A suite's arms compared in detail: per-subset tables, paired tests against a baseline arm, plots.

For each table of a suite (:func:`envengineer.suite.tables` groups the configs), from the
finished runs on disk:

- one table per evaluation set (the validation set, then each benchmark): for each arm the
  mean ± sd over seeds of the valid and optimal rate in every subset the set declares, its
  declared aggregate (MAPF: the paper's Sum) and the overall rates;
- paired tests against the baseline arm (the manifest's ``baseline``, else the arm named
  ``fixed``, else the only config whose engineer is ``fixed``): on the same instances of each
  set, how many the arm solves that the baseline does not (+) and the reverse (−), with the
  two-sided exact sign test (:func:`envengineer.metrics.sign_test`), per seed (arm seed s
  against baseline seed s) and pooled over the seeds (with Holm's adjustment across the arms);
- seeds as the unit (:mod:`envengineer.suite_stats`): each arm's per-seed values against the
  baseline's, by Welch's t test and an exact permutation test; the validation table also shows
  the valid rate averaged over the rounds and, where the runs recorded it, the sampled pass@1;
- how far each arm's generator configs are from the baseline's, per knob and round;
- plots (matplotlib, only when installed): the validation rates per round of every arm side by
  side, per group of the task's primary grouping, the sets' figures per arm, and each arm's
  config trajectory (every declared knob, per group, per round, per seed).

Everything task-specific is read through the declarations (:mod:`envengineer.drawn`): the
sets' subsets and aggregates, the task's groupings and its knob table.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envengineer.compare import MISSING, Column, Comparison, Stat, to_csv, to_markdown
from envengineer.comparison_stats import holm
from envengineer.drawn import BenchView, KnobLayout
from envengineer.metrics import sign_test
from envengineer.runview import RunView, Stage, load_run, rate
from envengineer.suite_stats import VALIDATION, fmt_p, rich_table, seed_table as seed_tests, validation_figures

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
    that ran it (as :func:`envengineer.compare.run_figures` takes them), with their verdicts."""
    from envengineer.rundir import RunDir

    view = load_run(run_dir, registry)
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


# ------------------------------------------------------------------ paired tests


@dataclass(frozen=True)
class Paired:
    """An arm against the baseline on the same instances: gained (+), lost (−), pairs, p."""

    gained: int
    lost: int
    n: int

    @property
    def p(self) -> float:
        return sign_test(self.gained, self.lost)

    def __str__(self) -> str:
        return f"+{self.gained} −{self.lost} (n {self.n}), p = {self.p:.3f}"

    def __add__(self, other: Paired) -> Paired:
        return Paired(self.gained + other.gained, self.lost + other.lost, self.n + other.n)


def paired(arm: Mapping[str, Mapping[str, bool]], baseline: Mapping[str, Mapping[str, bool]], metric: str) -> Paired | None:
    """``arm`` against ``baseline`` on the instances both were scored on (by id); None without any."""
    common = [i for i in baseline if i in arm]
    if not common:
        return None
    gained = sum(1 for i in common if arm[i][metric] and not baseline[i][metric])
    lost = sum(1 for i in common if baseline[i][metric] and not arm[i][metric])
    return Paired(gained, lost, len(common))


def pooled(results: Sequence[Paired | None]) -> Paired | None:
    """The pairs of every seed together (an instance counts once per seed)."""
    present = [r for r in results if r is not None]
    if not present:
        return None
    total = present[0]
    for r in present[1:]:
        total = total + r
    return total


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
    from envengineer.runconfig import validation_set
    from envengineer.suite import bench_views

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


def paired_tables(report: ArmsReport) -> tuple[Comparison, Comparison] | None:
    """(pooled over seeds, per seed) paired tests of every arm against the baseline; None without a baseline."""
    base = report.baseline
    if base is None:
        return None
    base_runs = {r.seed: r for r in base.runs}
    columns = [Column("arm", "arm", "", "arm", False)]
    seed_columns = [Column("arm", "arm", "", "arm", False), Column("seed", "seed", "", "seed", False)]
    for key, view in report.sets:
        for metric in METRICS:
            column = Column(f"{key}:{metric}", f"{report.set_label(key, view)} {metric}", report.set_label(key, view), metric, False)
            columns += [column, Column(f"{key}:{metric}:holm", f"{report.set_label(key, view)} {metric} Holm p",
                                       report.set_label(key, view), f"{metric} Holm p", False)]
            seed_columns.append(column)
    pooled_rows, seed_rows = [], []
    family: dict[str, list[float | None]] = {}  # column -> each arm's pooled p, for Holm's adjustment
    for arm in report.arms:
        if arm is base:
            continue
        row: dict[str, Any] = {"arm": arm.label}
        per_seed: dict[int, dict[str, Any]] = {}
        for key, _view in report.sets:
            for metric in METRICS:
                results = []
                for run in arm.runs:
                    other = base_runs.get(run.seed)
                    result = paired(run.sets[key].verdicts, other.sets[key].verdicts, metric) if other is not None else None
                    results.append(result)
                    per_seed.setdefault(run.seed, {"arm": arm.label, "seed": str(run.seed)})[f"{key}:{metric}"] = str(result) if result else MISSING
                total = pooled(results)
                row[f"{key}:{metric}"] = str(total) if total else MISSING
                family.setdefault(f"{key}:{metric}", []).append(total.p if total else None)
        pooled_rows.append(row)
        seed_rows += [per_seed[s] for s in sorted(per_seed)]
    for column, pvalues in family.items():
        for row, adjusted in zip(pooled_rows, holm(pvalues)):
            row[f"{column}:holm"] = fmt_p(adjusted)
    noise = noise_rows(report)
    if noise is not None:
        pooled_rows.append(noise[0])
        seed_rows += noise[1]
    what = (f"Against the baseline {base.label} on the same instances: + instances the arm solves (valid, or optimal) and the "
            f"baseline does not, − the reverse, n the instances paired, p the two-sided exact sign test on + and −.")
    pooled_note = what + (" Pooled: the pairs of every seed where both runs finished (arm seed s against baseline seed s), "
                          "each instance once per seed; the seeds share their instances, so the pooled p treats repeated "
                          "instances as independent pairs and is an approximation. Holm p: the pooled p adjusted "
                          "(Holm's step-down) over the arms compared with the baseline in the column, so that a "
                          "table of several arms does not find a difference by the number of its tries alone; "
                          "the noise row is not one of them.")
    noise_note = (f" The row '{base.label} vs itself' pairs the baseline's seed s with its seed s + 1 (0 with 1, 1 with 2, …; "
                  "not the last with the first: around a closed cycle every instance is gained as often as it is lost, so "
                  "a pooled cycle is always + = −): two runs of the same arm, so its + and − are what training noise alone "
                  "gives, the floor an arm's + and − must clear before they say anything about its engineer.") if len(base.runs) > 1 else ""
    return (Comparison(columns, pooled_rows, pooled_note + noise_note),
            Comparison(seed_columns, seed_rows, what + " One row per seed." + noise_note))


def noise_rows(report: ArmsReport) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """The baseline against itself, seed s against seed s + 1: the paired figures of training noise alone."""
    base = report.baseline
    runs = sorted(base.runs, key=lambda r: r.seed) if base is not None else []
    if len(runs) < 2:
        return None
    label = f"{base.label} vs itself"
    pairs = [(runs[i], runs[i + 1]) for i in range(len(runs) - 1)]  # a chain: a closed cycle pools to + = − by construction
    row: dict[str, Any] = {"arm": label}
    seed_rows = [{"arm": label, "seed": f"{a.seed} vs {b.seed}"} for a, b in pairs]
    for key, _view in report.sets:
        for metric in METRICS:
            results = [paired(b.sets[key].verdicts, a.sets[key].verdicts, metric) for a, b in pairs]
            for seed_row, result in zip(seed_rows, results):
                seed_row[f"{key}:{metric}"] = str(result) if result else MISSING
            total = pooled(results)
            row[f"{key}:{metric}"] = str(total) if total else MISSING
    return row, seed_rows


# ------------------------------------------------------------------ configs


@dataclass(frozen=True)
class Fine(Stat):
    """A mean ± sd shown with three significant digits (knob units: 0.05 is not 0.1)."""

    def __str__(self) -> str:
        return f"{self.mean:.3g}" if self.sd is None else f"{self.mean:.3g} ± {self.sd:.2g}"


def knob_layout(report: ArmsReport) -> KnobLayout | None:
    from envengineer.drawn import knob_layout as layout_of

    configs = [s.config for a in report.arms for r in a.runs for s in r.view.rounds]
    return layout_of(report.generator, configs)


def config_values(run: ArmRun, layout: KnobLayout) -> list[tuple[str, dict[str, dict[str, Any]]]]:
    """(round label, {group: {knob: value}}) of every round config the run holds."""
    return [(s.label, values) for s in run.view.rounds if (values := layout.values(s.config)) is not None]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def config_distance(a: Mapping[str, Mapping[str, Any]], b: Mapping[str, Mapping[str, Any]], knob: str, share: bool) -> float | None:
    """How far config ``a`` is from ``b`` in ``knob``: for a budget share, the total variation distance
    (half the summed absolute differences: the share of the budget that moved); else the mean absolute
    difference over the groups both have."""
    groups = [g for g in a if g in b]
    pairs = [(_number((a[g] or {}).get(knob)), _number((b[g] or {}).get(knob))) for g in groups]
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

    from envengineer.rundir import RunDir

    folder = RunDir(run.view.path)
    lines = {f"{r['round']:02d}": dict(r) for r in json_records(folder.history_path)
             if r.get("step") == "train" and isinstance(r.get("round"), int)}
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
                row[f"r:{label}"] = Stat.of([_number(rounds.get(label, {}).get(key)) for rounds in per_seed])
            totals = [sum(_number(r.get(key)) or 0 for r in rounds.values()) if rounds and key not in _RATES else None for rounds in per_seed]
            row["total"] = Stat.of(totals)
            rows.append(row)
    note = ("What each round trained on, from the trainer's own record (history.jsonl): the prompts it kept (a GRPO "
            "prefilter keeps those the policy solves sometimes: all-right and all-wrong groups carry no signal) and "
            "its optimizer steps; and from the round's training signal (train/signal.json), the prompts whose sampled "
            "outcomes were mixed (the ones GRPO learns from) and the share of sampled completions that were valid. Every "
            "arm generates the same number of instances a round; what it trains on depends on how well its environment "
            "matches the policy. Mean ± sd over seeds.")
    return Comparison(columns, rows, note, over_seeds=True)


# ------------------------------------------------------------------ plots


def _stage_rate(stage: Stage | None, metric: str, *path: str) -> float | None:
    value = rate(stage.eval if stage else None, f"{metric}_rate", *path)
    return None if value is None else 100 * value


def _per_round(arm: Arm, metric: str, *path: str) -> tuple[list[str], list[Stat | None], list[list[float | None]]]:
    """Stage labels (base, 00, ...), mean ± sd over seeds per stage, and each seed's values."""
    labels = list(dict.fromkeys(s.label for r in arm.runs for s in r.view.stages if s.eval is not None))
    per_seed = []
    for run in arm.runs:
        stages = {s.label: s for s in run.view.stages}
        per_seed.append([_stage_rate(stages.get(label), metric, *path) for label in labels])
    stats = [Stat.of([values[i] for values in per_seed]) for i in range(len(labels))]
    return labels, stats, per_seed


def plot_rounds(report: ArmsReport, path: Path) -> Path | None:
    """Validation valid and optimal rate per round, one panel per arm side by side (mean ± sd over
    seeds, each seed a faint line), then every arm's mean valid rate on one panel."""
    from envengineer.report_plots import _PALETTE, _new_figure, _percent_axis, _save

    arms = [a for a in report.arms if a.runs]
    if not arms:
        return None
    fig, axes = _new_figure(3.2 * (len(arms) + 1) + 0.6, 3.4, ncols=len(arms) + 1)
    top = 0.0
    for ax, arm in zip(axes[0], arms):
        for metric, color in zip(METRICS, _PALETTE):
            labels, stats, per_seed = _per_round(arm, metric)
            x = list(range(len(labels)))
            for values in per_seed:
                points = [(xi, v) for xi, v in zip(x, values) if v is not None]
                if points:
                    ax.plot(*zip(*points), color=color, alpha=0.25, lw=0.8)
            points = [(xi, s.mean, s.sd or 0) for xi, s in zip(x, stats) if s is not None]
            if points:
                px, py, pe = zip(*points)
                ax.errorbar(px, py, yerr=pe, color=color, marker="o", ms=4, capsize=3, lw=2, label=metric)
                top = max(top, max(y + e for y, e in zip(py, pe)))
            ax.set_xticks(x, labels)
        ax.set_title(f"{arm.label} ({len(arm.runs)} seed{'s' if len(arm.runs) != 1 else ''})")
        ax.set_xlabel("round")
    overlay = axes[0][len(arms)]
    for arm, color in zip(arms, _PALETTE * 3):
        labels, stats, _ = _per_round(arm, "valid")
        points = [(xi, s.mean) for xi, s in enumerate(stats) if s is not None]
        if points:
            overlay.plot(*zip(*points), color=color, marker="o", ms=4, lw=2 if arm.baseline else 1.4,
                         ls="--" if arm.baseline else "-", label=arm.label)
            overlay.set_xticks(range(len(labels)), labels)
    overlay.set_title("valid, mean over seeds")
    overlay.set_xlabel("round")
    overlay.legend(fontsize=7, loc="best")
    for ax in axes[0]:
        _percent_axis(ax, top=max(10.0, min(100.0, top * 1.15)))
    axes[0][0].legend(loc="lower right", fontsize=7)
    fig.suptitle(f"{report.title}: validation per round (mean ± sd over seeds; faint: each seed)")
    return _save(fig, path)


def plot_groups(report: ArmsReport, path: Path) -> Path | None:
    """Validation valid rate per group of the task's primary grouping, per round, one panel per arm (mean over seeds)."""
    from matplotlib import colormaps

    from envengineer.report_plots import _new_figure, _percent_axis, _save

    arms = [a for a in report.arms if a.runs]
    primary = next((r.view.primary() for a in arms for r in a.runs if r.view.primary() is not None), None)
    if not arms or primary is None:
        return None
    groups = primary.keys({k for a in arms for r in a.runs for s in r.view.stages for k in ((s.eval or {}).get("by") or {}).get(primary.name, {})})
    if not groups:
        return None
    cmap = colormaps["viridis"]
    fig, axes = _new_figure(3.2 * len(arms) + 1.4, 3.4, ncols=len(arms))
    top = 0.0
    for ax, arm in zip(axes[0], arms):
        for i, group in enumerate(groups):
            labels, stats, _ = _per_round(arm, "valid", primary.name, group)
            points = [(xi, s.mean) for xi, s in enumerate(stats) if s is not None]
            if points:
                ax.plot(*zip(*points), color=cmap(i / max(1, len(groups) - 1) * 0.9), marker="o", ms=3, lw=1.4, label=group)
                top = max(top, max(y for _, y in points))
            ax.set_xticks(range(len(labels)), labels)
        ax.set_title(arm.label)
        ax.set_xlabel("round")
    for ax in axes[0]:  # one scale for every arm, fitted to the data
        _percent_axis(ax, top=max(10.0, min(100.0, top * 1.15)))
    axes[0][-1].legend(title=primary.title, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7)
    fig.suptitle(f"{report.title}: validation valid rate by {primary.title} (mean over seeds)")
    return _save(fig, path)


def plot_sets(report: ArmsReport, path: Path) -> Path | None:
    """Each set's headline (its aggregate, else the overall rate), valid and optimal, per arm: mean ± sd over seeds."""
    from envengineer.report_plots import _PALETTE, _new_figure, _save

    arms = [a for a in report.arms if a.runs]
    if not arms or not report.sets:
        return None
    fig, axes = _new_figure(max(6.4, 3.6 * len(report.sets)), 3.6, ncols=len(report.sets))
    for ax, (key, view) in zip(axes[0], report.sets):
        width = 0.8 / len(arms)
        for j, arm in enumerate(arms):
            for m, (metric, alpha) in enumerate(zip(METRICS, (0.4, 1.0))):
                values = [view.figure(r.sets[key].summary, metric) if view.aggregate is not None
                          else (lambda v: None if v is None else 100 * v)(rate(r.sets[key].summary, f"{metric}_rate")) for r in arm.runs]
                stat = Stat.of(values)
                if stat is None:
                    continue
                x = m + (j - (len(arms) - 1) / 2) * width
                ax.bar(x, stat.mean, width=width * 0.92, yerr=stat.sd or 0, capsize=2, color=_PALETTE[j % len(_PALETTE)],
                       alpha=alpha, label=arm.label if m == 0 else None)
        ax.set_xticks(range(len(METRICS)), [f"{m} {view.symbol or '%'}" for m in METRICS])
        ax.set_title(report.set_label(key, view), fontsize=9)
    axes[0][0].legend(fontsize=7, loc="upper right")
    fig.suptitle(f"{report.title}: per set, mean ± sd over seeds (Σ: the set's aggregate over subsets)")
    return _save(fig, path)


def plot_config_trajectory(report: ArmsReport, arm: Arm, path: Path) -> Path | None:
    """One arm's generator configs: a row per seed, a panel per declared knob, a line per group over the rounds."""
    from matplotlib import colormaps

    from envengineer.report_plots import _new_figure, _save

    layout = knob_layout(report)
    runs = [r for r in arm.runs if layout is not None and config_values(r, layout)]
    if layout is None or not runs or not layout.knobs:
        return None
    groups = layout.group_keys({g for r in runs for _, values in config_values(r, layout) for g in values})
    cmap = colormaps["viridis"]
    knobs = layout.knobs
    fig, axes = _new_figure(3.4 * len(knobs) + 1.4, 2.6 * len(runs) + 0.6, nrows=len(runs), ncols=len(knobs))
    for row, run in zip(axes, runs):
        configs = config_values(run, layout)
        labels = [label for label, _ in configs]
        for ax, knob in zip(row, knobs):
            for i, group in enumerate(groups):
                ys = [_number((values.get(group) or {}).get(knob)) for _, values in configs]
                points = [(x, y) for x, y in enumerate(ys) if y is not None]
                if points:
                    ax.plot(*zip(*points), color=cmap(i / max(1, len(groups) - 1) * 0.9), marker="o", ms=3, lw=1.3, label=group)
            ax.set_xticks(range(len(labels)), labels)
            ax.set_title(f"{knob}, seed {run.seed}", fontsize=9)
            ax.set_xlabel("round")
    axes[0][-1].legend(title=layout.table or "config", loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7)
    fig.suptitle(f"{arm.label}: generator config per round (round NN: the config it trains on)")
    return _save(fig, path)


# ------------------------------------------------------------------ writing


def _slug(text: str) -> str:
    from envengineer.suite import slug

    return slug(text)


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
    images, problem = _plots(report, output / f"{slug}-plots")
    if images:
        parts.append("## Plots\n")
        parts += [f"![{image.stem}]({image.parent.name}/{image.name})\n" for image in images]
    if problem:
        parts.append(f"Plots skipped: {problem}\n")
    md = output / f"{slug}-arms.md"
    write_text(md, "\n".join(parts))
    return [md, *written, *images]


def _plots(report: ArmsReport, folder: Path) -> tuple[list[Path], str | None]:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return [], "matplotlib is not installed (pip install 'envengineer[report]')"
    images: list[Path] = []
    jobs: list[tuple[str, Any]] = [
        ("rounds.png", lambda p: plot_rounds(report, p)),
        ("groups.png", lambda p: plot_groups(report, p)),
        ("sets.png", lambda p: plot_sets(report, p)),
    ]
    jobs += [(f"config-{arm.stem}.png", lambda p, arm=arm: plot_config_trajectory(report, arm, p)) for arm in report.arms]
    problems = []
    for name, plot in jobs:
        try:
            image = plot(folder / name)
        except Exception as exc:  # noqa: BLE001 - one odd run must not cost the tables
            problems.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if image is not None:
            images.append(image)
    return images, "; ".join(problems) or None
