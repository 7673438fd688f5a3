"""The engineer benchmark's figures and statistics.

The figures of one config, from ``k`` valid answers of ``S = draws`` per instance and the number ``G`` of answers
that decide whether the trainer keeps a prompt (its prefilter's ``prefilter_samples`` when it screens, else its
GRPO group ``num_generations``; ``S`` when it declares neither: :attr:`RecordedRun.group_size`):

- ``mixed``: the chance that ``G`` answers are mixed (some right, some wrong: a prompt the prefilter keeps, a
  group GRPO learns from), ``1 - C(k, G)/C(S, G) - C(S - k, G)/C(S, G)``, unbiased for
  ``1 - p^G - (1 - p)^G`` when ``S >= G`` (a plug-in of ``p = k/S`` otherwise); ``all_right`` and ``all_wrong``
  are the two other terms; the three shares sum to 1;
- ``kept_per_budget``: ``budget`` (the run's instances per round) times the mean ``mixed``: the prompts a
  round of this config would give GRPO;
- ``learnability``: the mean over instances of ``k (S - k) / (S (S - 1))``, unbiased for ``p (1 - p)``;
- ``success``: the mean ``k / S``; ``by_group``: per group of the task's primary grouping, its share of the
  instances (the budget), success and mixed share.

Across scored configs: the per-engineer summary with cluster-bootstrap intervals over rounds (:func:`summarize`), and
the rank correlation of the score with the gain training then measured (:func:`predictive_check`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from envengineer.errors import ConfigError
from envengineer.plugins.engineer_bench.recorded import FIGURES, RECORDED, REFERENCE

# --------------------------------------------------------------------------------------------- the figures


def _choose(n: int, k: int) -> int:
    return math.comb(n, k) if 0 <= k <= n else 0


def instance_figures(k: int, s: int, group: int) -> dict[str, float]:
    """mixed / all_right / all_wrong chances of a GRPO group of ``group`` answers, and p(1-p), from ``k`` of ``s``."""
    p = k / s
    if s >= group:
        total = _choose(s, group)
        right, wrong = _choose(k, group) / total, _choose(s - k, group) / total
    else:  # too few draws for the unbiased estimate: plug in p
        right, wrong = p**group, (1 - p) ** group
    learn = k * (s - k) / (s * (s - 1)) if s > 1 else p * (1 - p)
    return {"mixed": 1 - right - wrong, "all_right": right, "all_wrong": wrong, "learnability": learn, "success": p}


def config_figures(records: Sequence[Mapping[str, Any]], valid: Sequence[Sequence[bool]], generator: Any, *, group_size: int,
                   budget: int) -> dict[str, Any]:
    """The figures of one scored config (module docstring) from its instances and their answers' validity."""
    if not records:
        raise ConfigError("engineers score: the generator gave no instances for a config")
    per = [instance_figures(sum(v), len(v), group_size) for v in valid]
    n = len(per)
    out: dict[str, Any] = {key: sum(f[key] for f in per) / n for key in ("mixed", "all_right", "all_wrong", "learnability", "success")}
    out["kept_per_budget"] = budget * out["mixed"]
    order = {g: i for i, g in enumerate(generator.groups())}
    by: dict[str, list[dict[str, float]]] = {}
    for record, figures in zip(records, per):
        by.setdefault(str(generator.group(record)), []).append(figures)
    out["by_group"] = {
        g: {"share": len(cells) / n, "success": sum(c["success"] for c in cells) / len(cells),
            "mixed": sum(c["mixed"] for c in cells) / len(cells)}
        for g, cells in sorted(by.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))
    }
    out["instances"] = n
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in out.items()}


# --------------------------------------------------------------------------------------------- the summary


def cluster_bootstrap(clusters: Sequence[Sequence[float]], *, resamples: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """A 95% percentile interval of the mean over all values, resampling whole clusters (a round's proposals share its
    instances and checkpoint, so they are not independent); None with fewer than two clusters."""
    clusters = [list(c) for c in clusters if c]
    if len(clusters) < 2:
        return None
    rng = random.Random(seed)
    means = []
    for _ in range(resamples):
        picked = [clusters[rng.randrange(len(clusters))] for _ in clusters]
        values = [v for c in picked for v in c]
        means.append(sum(values) / len(values))
    means.sort()
    return means[int(0.025 * resamples)], means[min(resamples - 1, int(0.975 * resamples))]


def uniform_move(moves: Mapping[str, Mapping[str, str]]) -> str | None:
    """``harder`` or ``easier`` when every group of ``moves`` (:func:`envengineer.api.config_moves`) moved its
    difficulty that way and none its budget; None otherwise."""
    words = {m.get("difficulty") for m in moves.values()}
    if len(words) != 1 or any(m.get("budget", "same") != "same" for m in moves.values()):
        return None
    word = words.pop()
    return word if word in ("harder", "easier") else None


def uniform_share(lines: Sequence[Mapping[str, Any]]) -> float | None:
    """The share of ``lines`` (one engineer's proposals) on tasks of two groups or more that are applied and
    :func:`uniform_move`: one word copied over every group. None without such a line holding ``moves``."""
    moved = [l for l in lines if isinstance(l.get("moves"), Mapping) and len(l["moves"]) > 1]
    return round(sum(not l["fallback"] and uniform_move(l["moves"]) is not None for l in moved) / len(moved), 6) if moved else None


def summarize(lines: Sequence[Mapping[str, Any]], engineers: Sequence[str], *, seed: int = 0) -> dict[str, Any]:
    """Per engineer: proposals, rounds, fallback rate, the restated share (applied proposals whose config is the
    round's own, over all proposals), the uniform share (:func:`uniform_move`, over proposals on tasks of two groups
    or more; None for lines scored before ``moves`` was recorded); each figure's mean and cluster-bootstrap interval over rounds
    (the proposals of one round form a cluster); the difference from the fixed reference in the same round; the
    per-run mean difference (one run: one seed) and the mean share of the budget per group."""
    out: dict[str, Any] = {}
    current = {(l["run"], l["round"]): l.get("config") for l in lines if l["engineer"] == REFERENCE}
    for engineer in engineers:
        mine = [line for line in lines if line["engineer"] == engineer]
        if not mine:
            continue
        rounds: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
        for line in mine:
            rounds.setdefault((line["run"], line["round"]), []).append(line)
        entry: dict[str, Any] = {"proposals": len(mine), "rounds": len(rounds),
                                 "fallback_rate": round(sum(bool(l["fallback"]) for l in mine) / len(mine), 6)}
        for key in FIGURES:
            values = [float(l[key]) for l in mine]
            interval = cluster_bootstrap([[float(l[key]) for l in c] for c in rounds.values()], seed=seed)
            entry[key] = {"mean": round(sum(values) / len(values), 6), "ci95": None if interval is None else [round(x, 6) for x in interval]}
        if engineer != REFERENCE:
            # restated: an applied proposal (not a fallback, which keeps the config by definition) whose config after
            # projection is the round's own, value for value; over every proposal, beside the fallback rate
            same = [not l["fallback"] and l.get("config") == current[l["run"], l["round"]] for l in mine
                    if (l["run"], l["round"]) in current]
            entry["restated"] = round(sum(same) / len(same), 6) if same else None
            # uniform: an applied proposal that moves every group's difficulty the same way (all harder or all easier)
            # and no group's budget, on a task of two groups or more: one word copied, not a reading of the evidence
            entry["uniform"] = uniform_share(mine)
            for key in ("kept_per_budget", "learnability"):
                values = [float(l["vs_fixed"][key]) for l in mine]
                interval = cluster_bootstrap([[float(l["vs_fixed"][key]) for l in c] for c in rounds.values()], seed=seed)
                entry[f"vs_fixed_{key}"] = {"mean": round(sum(values) / len(values), 6),
                                            "ci95": None if interval is None else [round(x, 6) for x in interval]}
            per_run: dict[str, list[float]] = {}
            for line in mine:
                per_run.setdefault(line["run"], []).append(float(line["vs_fixed"]["kept_per_budget"]))
            entry["per_run_vs_fixed_kept"] = {run: round(sum(v) / len(v), 6) for run, v in per_run.items()}
            entry["runs_above_fixed"] = sum(v > 0 for v in entry["per_run_vs_fixed_kept"].values())
            entry["runs_below_fixed"] = sum(v < 0 for v in entry["per_run_vs_fixed_kept"].values())
        shares: dict[str, float] = {}
        for line in mine:
            for g, cell in line["by_group"].items():
                shares[g] = shares.get(g, 0.0) + cell["share"] / len(mine)
        entry["budget_share"] = {g: round(v, 6) for g, v in shares.items()}
        out[engineer] = entry
    return out


# --------------------------------------------------------------------------------------------- does it predict?


def spearman(x: Sequence[float], y: Sequence[float]) -> dict[str, Any]:
    """Spearman's rank correlation (ties share their mean rank) with its two-sided p (t approximation, n − 2
    degrees of freedom): scipy.stats.spearmanr; rho and p None under 3 points or when either side is constant."""
    n = len(x)
    if n < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return {"n": n, "rho": None, "p": None}
    from scipy import stats

    result = stats.spearmanr(x, y)
    rho, p = float(result.statistic), float(result.pvalue)
    return {"n": n, "rho": round(rho, 6), "p": float(f"{0.0 if abs(rho) >= 1 else p:.3g}")}


def predictive_check(lines: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Across arms and rounds: the rank correlation of the score of the config each run trained on next (its
    expected kept prompts, and minus the round's reference) with the gain training on it then measured."""
    recorded = [l for l in lines if l["engineer"] == RECORDED and l.get("next_gain")]
    measures = sorted({key for l in recorded for key in l["next_gain"]})
    out: dict[str, Any] = {}
    for score_key in ("kept_per_budget", "vs_fixed_kept_per_budget", "learnability"):
        for measure in measures:
            pairs = [(float(l["vs_fixed"]["kept_per_budget"] if score_key == "vs_fixed_kept_per_budget" else l[score_key]),
                      float(l["next_gain"][measure])) for l in recorded if measure in l["next_gain"]]
            out[f"{score_key} ~ {measure}"] = spearman([a for a, _ in pairs], [b for _, b in pairs])
    calibrated = [(float(l["kept_per_budget"]), float(l["next_mixed"])) for l in recorded if l.get("next_mixed") is not None]
    if calibrated:
        predicted, measured = [a for a, _ in calibrated], [b for _, b in calibrated]
        out["kept_per_budget ~ mixed prompts the trainer found next"] = {
            **spearman(predicted, measured), "mean_predicted": round(sum(predicted) / len(predicted), 3),
            "mean_measured": round(sum(measured) / len(measured), 3),
            "mean_abs_error": round(sum(abs(a - b) for a, b in calibrated) / len(calibrated), 3)}
    return out
