"""The arms report's plots (matplotlib, only when installed): the validation rates per round of every
arm side by side, per group of the task's primary grouping, the sets' figures per arm, and each arm's
config trajectory (every declared knob, per group, per round, per seed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envengineer.plugins.report.compare import Stat
from envengineer.plugins.report.view import Stage, rate
from envengineer.plugins.suite.arms.runs import METRICS, Arm, ArmsReport, as_number, config_values, knob_layout


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
    from envengineer.plugins._shared.plotting import PALETTE, new_figure, percent_axis, save_figure

    arms = [a for a in report.arms if a.runs]
    if not arms:
        return None
    fig, axes = new_figure(3.2 * (len(arms) + 1) + 0.6, 3.4, ncols=len(arms) + 1)
    top = 0.0
    for ax, arm in zip(axes[0], arms):
        for metric, color in zip(METRICS, PALETTE):
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
    for arm, color in zip(arms, PALETTE * 3):
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
        percent_axis(ax, top=max(10.0, min(100.0, top * 1.15)))
    axes[0][0].legend(loc="lower right", fontsize=7)
    fig.suptitle(f"{report.title}: validation per round (mean ± sd over seeds; faint: each seed)")
    return save_figure(fig, path)


def plot_groups(report: ArmsReport, path: Path) -> Path | None:
    """Validation valid rate per group of the task's primary grouping, per round, one panel per arm (mean over seeds)."""
    from matplotlib import colormaps

    from envengineer.plugins._shared.plotting import new_figure, percent_axis, save_figure

    arms = [a for a in report.arms if a.runs]
    primary = next((r.view.primary() for a in arms for r in a.runs if r.view.primary() is not None), None)
    if not arms or primary is None:
        return None
    groups = primary.keys({k for a in arms for r in a.runs for s in r.view.stages for k in ((s.eval or {}).get("by") or {}).get(primary.name, {})})
    if not groups:
        return None
    cmap = colormaps["viridis"]
    fig, axes = new_figure(3.2 * len(arms) + 1.4, 3.4, ncols=len(arms))
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
        percent_axis(ax, top=max(10.0, min(100.0, top * 1.15)))
    axes[0][-1].legend(title=primary.title, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7)
    fig.suptitle(f"{report.title}: validation valid rate by {primary.title} (mean over seeds)")
    return save_figure(fig, path)


def plot_sets(report: ArmsReport, path: Path) -> Path | None:
    """Each set's headline (its aggregate, else the overall rate), valid and optimal, per arm: mean ± sd over seeds."""
    from envengineer.plugins._shared.plotting import PALETTE, new_figure, save_figure

    arms = [a for a in report.arms if a.runs]
    if not arms or not report.sets:
        return None
    fig, axes = new_figure(max(6.4, 3.6 * len(report.sets)), 3.6, ncols=len(report.sets))
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
                ax.bar(x, stat.mean, width=width * 0.92, yerr=stat.sd or 0, capsize=2, color=PALETTE[j % len(PALETTE)],
                       alpha=alpha, label=arm.label if m == 0 else None)
        ax.set_xticks(range(len(METRICS)), [f"{m} {view.symbol or '%'}" for m in METRICS])
        ax.set_title(report.set_label(key, view), fontsize=9)
    axes[0][0].legend(fontsize=7, loc="upper right")
    fig.suptitle(f"{report.title}: per set, mean ± sd over seeds (Σ: the set's aggregate over subsets)")
    return save_figure(fig, path)


def plot_config_trajectory(report: ArmsReport, arm: Arm, path: Path) -> Path | None:
    """One arm's generator configs: a row per seed, a panel per declared knob, a line per group over the rounds."""
    from matplotlib import colormaps

    from envengineer.plugins._shared.plotting import new_figure, save_figure

    layout = knob_layout(report)
    runs = [r for r in arm.runs if layout is not None and config_values(r, layout)]
    if layout is None or not runs or not layout.knobs:
        return None
    groups = layout.group_keys({g for r in runs for _, values in config_values(r, layout) for g in values})
    cmap = colormaps["viridis"]
    knobs = layout.knobs
    fig, axes = new_figure(3.4 * len(knobs) + 1.4, 2.6 * len(runs) + 0.6, nrows=len(runs), ncols=len(knobs))
    for row, run in zip(axes, runs):
        configs = config_values(run, layout)
        labels = [label for label, _ in configs]
        for ax, knob in zip(row, knobs):
            for i, group in enumerate(groups):
                ys = [as_number((values.get(group) or {}).get(knob)) for _, values in configs]
                points = [(x, y) for x, y in enumerate(ys) if y is not None]
                if points:
                    ax.plot(*zip(*points), color=cmap(i / max(1, len(groups) - 1) * 0.9), marker="o", ms=3, lw=1.3, label=group)
            ax.set_xticks(range(len(labels)), labels)
            ax.set_title(f"{knob}, seed {run.seed}", fontsize=9)
            ax.set_xlabel("round")
    axes[0][-1].legend(title=layout.table or "config", loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7)
    fig.suptitle(f"{arm.label}: generator config per round (round NN: the config it trains on)")
    return save_figure(fig, path)


def write_plots(report: ArmsReport, folder: Path) -> tuple[list[Path], str | None]:
    """Every plot into ``folder``: the images written, and what went wrong (None: nothing)."""
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
