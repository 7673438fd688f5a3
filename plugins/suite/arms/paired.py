"""Paired tests of a suite's arms against the baseline arm on the same instances: how many each
arm solves that the baseline does not (+) and the reverse (−), with the two-sided exact sign test
(:func:`envengineer.components.metrics.sign_test`), per seed and pooled over the seeds (Holm-adjusted across the
arms), and the baseline against itself (seed s against seed s + 1) as the floor of training noise."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envengineer.plugins.report.compare import MISSING, Column, Comparison
from envengineer.plugins.suite.arms.stats import holm
from envengineer.components.metrics import sign_test
from envengineer.plugins.suite.arms.runs import METRICS, ArmsReport
from envengineer.plugins.suite.arms.seeds import fmt_p


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
