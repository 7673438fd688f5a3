"""Seeds as the unit: the arms report's figures per run beyond the last round, and the table that
tests each arm's per-seed values against the baseline's.

The paired sign tests of :mod:`envengineer.plugins.suite.arms.paired` compare policies instance by instance;
they do not see how far an arm moves from one seed to the next. This module takes each arm as
its handful of per-seed values (the last round's valid rate on every set, and the validation
rate averaged over the rounds) and compares them with the baseline's by Welch's t test and an
exact permutation test (:mod:`envengineer.plugins.suite.arms.stats`), Holm-adjusted across the arms.

It also reads what else a run's validation summary may hold: ``sampled``, the sampled pass@1
at the trainer's temperature, which older runs do not have.

It reads the report's objects (:class:`envengineer.plugins.suite.arms.runs.ArmsReport`) and imports nothing
from :mod:`envengineer.plugins.suite.arms.page`, which imports from here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envengineer.plugins.report.compare import MISSING, Column, Comparison, Stat, cell, percent
from envengineer.plugins.suite.arms.stats import area_under_rounds, holm, permutation_test, welch
from envengineer.plugins.report.view import rate
from envengineer.plugins.suite.arms.runs import VALIDATION, ArmRun, ArmsReport


# ------------------------------------------------------------------ what a run holds beyond the last round


class Sampled(BaseModel):
    """A validation summary's ``sampled`` block: pass@1 over ``n`` samples per instance at ``temperature``."""

    model_config = ConfigDict(extra="ignore")

    n: int = Field(ge=1)
    temperature: float = Field(ge=0)
    pass1: float = Field(ge=0, le=1)
    by: dict[str, dict[str, float]] = Field(default_factory=dict)


def sampled(summary: Mapping[str, Any] | None) -> Sampled | None:
    """The summary's sampled pass@1, or None when it has none or it is malformed (older runs have none)."""
    block = summary.get("sampled") if isinstance(summary, Mapping) else None
    if not isinstance(block, Mapping):
        return None
    try:
        return Sampled.model_validate(dict(block))
    except ValidationError:
        return None


def _summary(run: ArmRun, key: str) -> Mapping[str, Any] | None:
    result = run.sets.get(key)
    return result.summary if result is not None else None


def round_rates(run: ArmRun, metric: str = "valid") -> list[float | None]:
    """The validation rate (percent) of round 0 … the last evaluated round (the base evaluation left
    out: it is the same starting policy for every arm); None for a round in between without one."""
    rounds = getattr(run.view, "rounds", None) or []
    evaluated = [s.index for s in rounds if s.eval is not None and s.index is not None]
    if not evaluated:
        return []
    stages = {s.index: s for s in rounds}
    return [percent(rate(getattr(stages.get(i), "eval", None), f"{metric}_rate")) for i in range(max(evaluated) + 1)]


def run_auc(run: ArmRun, metric: str = "valid") -> float | None:
    """The run's validation rate averaged over its rounds (:func:`area_under_rounds`)."""
    return area_under_rounds(round_rates(run, metric))


def run_sampled(run: ArmRun) -> float | None:
    """The run's sampled pass@1 (percent) on the validation set's last evaluation."""
    block = sampled(_summary(run, VALIDATION))
    return None if block is None else 100 * block.pass1


def validation_figures(report: ArmsReport) -> tuple[list[tuple[Column, Callable[[ArmRun], float | None]]], str]:
    """The validation table's figures beyond the last round's rates, each a column and its per-run value:
    pass@1 (sampled) when any run recorded it, the valid rate averaged over the rounds when any run has
    every round's; and the note that says what they are."""
    runs = [r for a in report.arms for r in a.runs]
    figures: list[tuple[Column, Callable[[ArmRun], float | None]]] = []
    notes = []
    blocks = [b for r in runs if (b := sampled(_summary(r, VALIDATION))) is not None]
    if blocks:
        figures.append((Column("sampled:pass1", "pass@1 (sampled) %", "sampled", "pass@1 %"), run_sampled))
        settings = ", ".join(sorted({f"{b.n} samples at temperature {b.temperature:g}" for b in blocks}))
        notes.append(f"pass@1 (sampled): the share of sampled answers that succeed ({settings} per instance, "
                     "the trainer's temperature), beside the greedy valid rate of one answer per instance; "
                     "– for runs that did not record it.")
    if any(run_auc(r) is not None for r in runs):
        figures.append((Column("auc:valid", "valid, mean over rounds %", "over rounds", "valid %"), run_auc))
        notes.append("valid, mean over rounds: the valid rate averaged over round 00 … the last round (the area "
                     "under the per-round curve over the number of rounds; the base evaluation, the same for every "
                     "arm, left out): an arm that learns early scores higher than one that gets there late.")
    return figures, " ".join(notes)


# ------------------------------------------------------------------ the seed-level tests


def fmt_p(p: float | None) -> str:
    """A p-value as the tables show it: three decimals, or two significant digits below 0.001."""
    if p is None:
        return MISSING
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def seed_figures(report: ArmsReport) -> list[tuple[str, Callable[[ArmRun], float | None]]]:
    """(figure title, per-run value) the seed-level tests run on: each set's last-round valid rate, and
    after the validation set's, its valid rate averaged over the rounds."""
    figures: list[tuple[str, Callable[[ArmRun], float | None]]] = []
    for key, view in report.sets:
        label = report.set_label(key, view)
        figures.append((f"{label} valid %",
                        lambda run, key=key: percent(rate(_summary(run, key), "valid_rate"))))
        if key == VALIDATION:
            figures.append((f"{label} valid, mean over rounds %", run_auc))
    return figures


def seed_table(report: ArmsReport) -> Comparison | None:
    """Rows: (figure, arm); each arm's per-seed values against the baseline's: the difference of the
    means with Welch's 95% interval, Welch's p and the exact permutation p, each with Holm's adjustment
    across the arms of the figure. None without a baseline or another arm."""
    base = report.baseline
    arms = [a for a in report.arms if a is not base]
    if base is None or not arms:
        return None
    columns = [
        Column("figure", "figure", "", "figure", False), Column("arm", "arm", "", "arm", False),
        Column("seeds", "seeds (arm vs baseline)", "", "seeds", False),
        Column("arm_mean", "mean (arm)", "mean", "arm"), Column("base_mean", "mean (baseline)", "mean", "baseline"),
        Column("diff", "difference (points)", "", "difference"),
        Column("low", "95% CI low", "95% CI", "low"), Column("high", "95% CI high", "95% CI", "high"),
        Column("df", "Welch df", "Welch", "df"),
        Column("welch_p", "Welch p", "Welch", "p", False), Column("welch_holm", "Welch p (Holm)", "Welch", "Holm p", False),
        Column("perm_p", "permutation p", "permutation", "p", False),
        Column("perm_holm", "permutation p (Holm)", "permutation", "Holm p", False),
        Column("remark", "remark", "", "remark", False),
    ]
    rows: list[dict[str, Any]] = []
    shapes: set[tuple[int, int, int, bool]] = set()
    for title, value in seed_figures(report):
        theirs = [v for r in base.runs if (v := value(r)) is not None]
        family = []
        for arm in arms:
            ours = [v for r in arm.runs if (v := value(r)) is not None]
            row: dict[str, Any] = {"figure": title, "arm": arm.label, "seeds": f"{len(ours)} vs {len(theirs)}",
                                   "arm_mean": Stat.of(ours), "base_mean": Stat.of(theirs)}
            test = welch(ours, theirs)
            permutation = permutation_test(ours, theirs) if min(len(ours), len(theirs)) > 1 else None
            if test is not None:
                row |= {"diff": test.difference, "low": test.low, "high": test.high, "df": test.df}
                row["remark"] = test.why or ""
            else:
                row["remark"] = "no finished seed with this figure"
            if permutation is not None:
                shapes.add((len(ours), len(theirs), permutation.splits, permutation.exact))
            family.append((row, test.p if test is not None else None, permutation.p if permutation is not None else None))
            rows.append(row)
        if all(r["arm_mean"] is None for r, _, _ in family) and not theirs:
            del rows[len(rows) - len(family):]  # a figure no run has (older runs: no per-round evaluations)
            continue
        for (row, wp, pp), wh, ph in zip(family, holm([w for _, w, _ in family]), holm([p for _, _, p in family])):
            row |= {"welch_p": fmt_p(wp), "welch_holm": fmt_p(wh), "perm_p": fmt_p(pp), "perm_holm": fmt_p(ph)}
    if not rows:
        return None
    return Comparison(columns, rows, _seed_note(base.label, shapes))


def _seed_note(baseline: str, shapes: set[tuple[int, int, int, bool]]) -> str:
    floors = []
    for n_arm, n_base, splits, exact in sorted(shapes):
        if exact:
            floor = min(1.0, 2 / splits)
            floors.append(f"with {n_arm} and {n_base} seeds it has {splits} splits, so its smallest two-sided p is "
                          f"{floor:.3g}" + (" and it cannot reach 0.05" if floor > 0.05 else ""))
        else:
            floors.append(f"with {n_arm} and {n_base} seeds, {splits:,} seeded random splits (not all {math.comb(n_arm + n_base, n_arm):,})")
    return (
        f"Seeds as the unit: each arm's per-seed values against the baseline {baseline}'s, as two independent "
        "samples (seed s of an arm is not paired with seed s of the baseline). mean (arm), mean (baseline): "
        "mean ± sd over the seeds; difference: mean(arm) − mean(baseline), in points. Valid %: the last evaluated round "
        "(benchmarks: the last round that ran them); valid, mean over rounds: the validation rate averaged over "
        "round 00 … the last (base evaluation left out). Welch: Welch's t test and its 95% interval for the "
        "difference; it assumes each arm's per-seed values normal (variances may differ) and has few degrees of "
        "freedom with few seeds, so its interval is wide. Permutation: the exact two-sample test of the difference "
        "of means over every split of the pooled seeds; it assumes only that the seeds are exchangeable when the "
        "arms do not differ. "
        + (f"Its resolution is set by the seeds: {'; '.join(floors)}. " if floors else "")
        + "Holm: each p adjusted over the arms compared with the baseline on the same figure (one family per figure "
        "and test). sd 0 in both arms: no Welch test or interval (the permutation test still applies); "
        "one seed in an arm: no test."
    )


# ------------------------------------------------------------------ printing


def rich_table(comparison: Comparison, title: str) -> Any:
    """Any comparison on screen, its cells as in its markdown; columns empty in every row left out to save width."""
    from rich.table import Table

    shown = [c for c in comparison.columns if any(cell(row.get(c.key), c) != MISSING for row in comparison.rows)]
    table = Table(title=title, title_justify="left", caption=comparison.note, caption_justify="left")
    for i, column in enumerate(shown):
        table.add_column(column.header, justify="right" if column.numeric else "left", style="bold" if i == 0 else None)
    for row in comparison.rows:
        table.add_row(*(cell(row.get(c.key), c) for c in shown))
    return table
