"""The report's plots: one PNG per concern, drawn from a :class:`~envengineer.plugins.report.view.RunView`.

Each ``plot_*`` function returns the file it wrote, or None when the run has nothing to
draw for it. What is drawn per group, per knob and per benchmark subset is what the run's
task declares (see :mod:`envengineer.plugins.report.drawn`). matplotlib is imported only here, inside
the functions, on the Agg canvas, never through pyplot's global state.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from envengineer.plugins._shared.plotting import PALETTE, new_figure, percent_axis, save_figure
from envengineer.plugins.report.view import RunView, Stage, rate

METRICS = ("valid", "optimal")
#: Colour maps of the config heatmaps, one per declared knob in order (MAPF: ratio, hole_ratio, wait_ratio).
KNOB_CMAPS = ("Blues", "Oranges", "Purples", "Greens", "Reds", "Greys", "YlOrBr", "BuPu")


def evaluated(run: RunView) -> list[Stage]:
    return [s for s in run.stages if s.eval is not None]


def plot_rates(run: RunView, path: Path) -> Path | None:
    """Overall valid and optimal rate per stage, with standard-error bars."""
    stages = evaluated(run)
    if not stages:
        return None
    fig, axes = new_figure(6.4, 3.4)
    ax = axes[0][0]
    x = list(range(len(stages)))
    for (metric, color), dy in zip(zip(METRICS, PALETTE), (4, -11)):
        y = [100 * (rate(s.eval, f"{metric}_rate") or 0) for s in stages]
        err = [100 * (rate(s.eval, f"{metric}_se") or 0) for s in stages]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, lw=2, color=color, label=f"{metric} rate")
        for xi, yi in zip(x, y):
            ax.annotate(f"{yi:.1f}", (xi, yi), textcoords="offset points", xytext=(7, dy), ha="left", fontsize=7, color=color)
    ax.set_xlim(-0.3, len(stages) - 0.5)
    ax.set_xticks(x, [s.title for s in stages])
    percent_axis(ax)
    ax.set_title("validation: overall (± standard error)")
    ax.legend(loc="lower right")
    return save_figure(fig, path)


def group_plot_name(run: RunView) -> str | None:
    """``rates_by_<primary grouping>.png`` (MAPF: ``rates_by_size.png``), or None without groupings."""
    primary = run.primary()
    return f"rates_by_{re.sub(r'[^A-Za-z0-9_-]+', '_', primary.name)}.png" if primary is not None else None


def plot_rates_by_group(run: RunView, path: Path) -> Path | None:
    """Valid and optimal rate per group of the task's primary grouping, one line per group across stages."""
    stages = evaluated(run)
    primary = run.primary()
    if not stages or primary is None:
        return None
    groups = primary.keys({k for s in stages for k in ((s.eval or {}).get("by") or {}).get(primary.name, {})})
    if not groups:
        return None
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    fig, axes = new_figure(10.5, 3.6, ncols=2)
    x = list(range(len(stages)))
    for ax, metric in zip(axes[0], METRICS):
        for i, group in enumerate(groups):
            y = [rate(s.eval, f"{metric}_rate", primary.name, group) for s in stages]
            err = [rate(s.eval, f"{metric}_se", primary.name, group) for s in stages]
            points = [(xi, 100 * yi, 100 * (ei or 0)) for xi, yi, ei in zip(x, y, err) if yi is not None]
            if not points:
                continue
            px, py, pe = zip(*points)
            color = cmap(i / max(1, len(groups) - 1) * 0.9)
            ax.errorbar(px, py, yerr=pe, marker="o", ms=4, capsize=2, lw=1.6, color=color, label=group)
        ax.set_xticks(x, [s.title for s in stages])
        percent_axis(ax)
        ax.set_title(f"validation {metric} rate by {primary.title}")
    axes[0][1].legend(title=primary.title, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return save_figure(fig, path)


def signal_stages(run: RunView) -> list[Stage]:
    return [s for s in run.rounds if s.signal]


def plot_signal(run: RunView, path: Path) -> Path | None:
    """The training signal per round: sampled success per group of the primary grouping, and the
    prompts with mixed outcomes (the ones GRPO learns from) against all-right and all-wrong ones."""
    stages = signal_stages(run)
    primary = run.primary()
    if not stages or primary is None:
        return None
    groups = primary.keys({k for s in stages for k in ((s.signal or {}).get("by") or {}).get(primary.name, {})})
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    fig, axes = new_figure(10.5, 3.6, ncols=2)
    x = list(range(len(stages)))
    ax = axes[0][0]
    for i, group in enumerate(groups):
        y = [(((s.signal or {}).get("by") or {}).get(primary.name) or {}).get(group, {}).get("success") for s in stages]
        points = [(xi, 100 * yi) for xi, yi in zip(x, y) if isinstance(yi, (int, float))]
        if points:
            px, py = zip(*points)
            ax.plot(px, py, marker="o", ms=4, lw=1.6, color=cmap(i / max(1, len(groups) - 1) * 0.9), label=group)
    ax.set_xticks(x, [s.title for s in stages])
    percent_axis(ax)
    ax.set_title(f"sampled success in training by {primary.title}")
    if groups:
        ax.legend(title=primary.title, fontsize=7, ncols=2)
    ax = axes[0][1]
    bottom = [0.0] * len(stages)
    for key, color in (("mixed", "#059669"), ("all_right", "#2563eb"), ("all_wrong", "#9ca3af")):
        values = [float(((s.signal or {}).get("overall") or {}).get(key) or 0) for s in stages]
        ax.bar(x, values, bottom=bottom, color=color, label=key.replace("_", " "))
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xticks(x, [s.title for s in stages])
    ax.set_title("training prompts by sampled outcome")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def failure_types(stages: Sequence[Stage]) -> list[str]:
    totals: dict[str, int] = {}
    for s in stages:
        for name, count in ((s.eval or {}).get("overall", {}).get("failures") or {}).items():
            totals[name] = totals.get(name, 0) + int(count or 0)
    return sorted(totals, key=lambda n: (-totals[n], n))


def plot_failures(run: RunView, path: Path) -> Path | None:
    """Failure types per stage as stacked bars (share of validation instances)."""
    stages = evaluated(run)
    types = failure_types(stages)
    if not stages or not types:
        return None
    fig, axes = new_figure(6.4, 3.4)
    ax = axes[0][0]
    x = list(range(len(stages)))
    bottom = [0.0] * len(stages)
    for name, color in zip(types, PALETTE * 3):
        heights = []
        for s in stages:
            overall = (s.eval or {}).get("overall", {})
            n = overall.get("n") or 0
            heights.append(100 * (overall.get("failures") or {}).get(name, 0) / n if n else 0.0)
        ax.bar(x, heights, bottom=bottom, width=0.6, color=color, label=name, edgecolor="white", linewidth=0.6)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_xticks(x, [s.title for s in stages])
    ax.set_ylim(0, max(bottom) * 1.15 or 1)
    ax.yaxis.set_major_formatter(lambda v, _pos: f"{v:.0f}%")
    ax.set_ylabel("share of validation instances")
    ax.set_title("failure types per round")
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], loc="center left", bbox_to_anchor=(1.0, 0.5))  # stack order
    return save_figure(fig, path)


def config_stages(run: RunView) -> list[tuple[Stage, dict[str, dict[str, Any]]]]:
    """The rounds whose config holds the knob layout, with ``{group: {knob: value}}`` of each."""
    layout = run.knob_layout()
    if layout is None:
        return []
    return [(s, values) for s in run.rounds if (values := layout.values(s.config)) is not None]


def plot_config(run: RunView, path: Path) -> Path | None:
    """The generator config per round: one heatmap per declared knob, groups × rounds."""
    layout, stages = run.knob_layout(), config_stages(run)
    if layout is None or not stages or not layout.knobs:
        return None
    groups = layout.group_keys({g for _, values in stages for g in values})
    knobs = layout.knobs
    width = len(knobs) * (1.6 + 0.62 * len(stages)) + 1.0
    fig, axes = new_figure(width, 0.36 * len(groups) + 1.4, ncols=len(knobs))
    for index, (ax, name) in enumerate(zip(axes[0], knobs)):
        grid = []
        for group in groups:
            row = []
            for _s, values in stages:
                value = (values.get(group) or {}).get(name)
                row.append(float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else float("nan"))
            grid.append(row)
        finite = [v for row in grid for v in row if v == v]
        vmin, vmax = (min(finite), max(finite)) if finite else (0.0, 1.0)
        if vmax - vmin < 1e-9:  # a field left alone: a flat mid tone, not a saturated block
            vmin, vmax = 0.0, (2 * vmax if vmax > 0 else 1.0)
        image = ax.imshow(grid, cmap=KNOB_CMAPS[index % len(KNOB_CMAPS)], aspect="auto", vmin=vmin, vmax=vmax)
        for i, row in enumerate(grid):
            for j, value in enumerate(row):
                if value == value:
                    ax.text(j, i, f"{value:.3f}".rstrip("0").rstrip(".") if value else "0", ha="center", va="center",
                            fontsize=7, color="white" if value > vmin + 0.6 * (vmax - vmin) else "#111827")
        ax.set_xticks(range(len(stages)), [s.label for s, _ in stages])
        ax.set_yticks(range(len(groups)), groups)
        ax.set_xlabel("round")
        ax.grid(False)
        ax.set_title(name)
        fig.colorbar(image, ax=ax, shrink=0.8)
    return save_figure(fig, path)


CURVE_PANELS = (
    ("reward_mean", "reward (mean ± std)"),
    ("zero_std_frac", "share of zero-variance groups"),
    ("kl", "KL"),
    ("completion_length", "completion length"),
)


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value else None


def plot_training(run: RunView, path: Path) -> Path | None:
    """Training curves of every round on one step axis, round boundaries marked."""
    stages = [s for s in run.rounds if s.curves]
    panels = [(k, t) for k, t in CURVE_PANELS if any(number(r.get(k)) is not None for s in stages for r in s.curves)]
    if not stages or not panels:
        return None
    ncols = 2 if len(panels) > 1 else 1
    nrows = (len(panels) + 1) // 2 if ncols == 2 else 1
    fig, axes = new_figure(10.5 if ncols == 2 else 6.4, 3.0 * nrows, nrows=nrows, ncols=ncols)
    flat = [ax for row in axes for ax in row]
    for ax in flat[len(panels):]:
        ax.set_visible(False)
    offset = 0.0
    spans = []
    for s in stages:
        steps = [number(r.get("step")) for r in s.curves]
        steps = [st if st is not None else float(i + 1) for i, st in enumerate(steps)]
        spans.append((s, [offset + st for st in steps]))
        offset += max(steps) if steps else 0
    for ax, (key, title) in zip(flat, panels):
        for (s, xs), color in zip(spans, PALETTE * 3):
            points = [(x, number(r.get(key)), number(r.get("reward_std"))) for x, r in zip(xs, s.curves)]
            points = [p for p in points if p[1] is not None]
            if not points:
                continue
            px = [p[0] for p in points]
            py = [p[1] for p in points]
            ax.plot(px, py, color=color, lw=1.6, label=f"round {s.label}", marker="o" if len(px) < 3 else None, ms=3)
            if key == "reward_mean" and all(p[2] is not None for p in points):
                ax.fill_between(px, [y - p[2] for y, p in zip(py, points)], [y + p[2] for y, p in zip(py, points)], color=color, alpha=0.15, lw=0)
        for _s, xs in spans[1:]:
            ax.axvline(xs[0] - 0.5 if xs else 0, color="#9ca3af", ls="--", lw=0.8)
        if key == "zero_std_frac":
            ax.set_ylim(0, 1.04)
        ax.set_title(title)
        ax.set_xlabel("training step (all rounds)")
    flat[0].legend(loc="best")
    return save_figure(fig, path)


def benched(run: RunView) -> list[str]:
    """The run's benchmarks that some stage ran, in declared order."""
    return [n for n in run.bench_names() if any(n in s.bench for s in run.stages)]


def plot_bench(run: RunView, path: Path) -> Path | None:
    """Benchmark valid (light) and optimal (dark) rate per declared subset and overall, per stage that ran it."""
    names = benched(run)
    if not names:
        return None
    fig, axes = new_figure(max(6.4, 3.9 * len(names)), 3.5, ncols=len(names))
    stage_colors = {s.label: c for s, c in zip([s for s in run.stages if s.bench], PALETTE * 3)}
    for ax, name in zip(axes[0], names):
        view = run.bench(name)
        stages = [s for s in run.stages if name in s.bench]
        subsets = view.subset_keys(s.bench[name] for s in stages)
        groups = [*subsets, "all"]
        width = 0.8 / len(stages)
        for j, s in enumerate(stages):
            xs = [g + (j - (len(stages) - 1) / 2) * width for g in range(len(groups))]
            summary = s.bench[name]
            for metric, alpha in (("valid", 0.35), ("optimal", 1.0)):
                values = [rate(summary, f"{metric}_rate", view.subsets.name, g) if g != "all" and view.subsets else rate(summary, f"{metric}_rate")
                          for g in groups]
                ys = [100 * (v or 0) for v in values]
                ax.bar(xs, ys, width=width * 0.92, color=stage_colors[s.label], alpha=alpha, label=f"{s.title}" if metric == "valid" else None)
        ax.set_xticks(range(len(groups)), groups)
        percent_axis(ax)
        ax.set_title(f"{view.label} ({name})" if view.label != name else name)
    axes[0][0].legend(loc="upper right", title="light: valid, dark: optimal", title_fontsize=7)
    return save_figure(fig, path)


#: (file name, plot) in page order; a None name is the run's own (the primary grouping's plot).
PLOTS: tuple[tuple[str | None, Callable[[RunView, Path], Path | None]], ...] = (
    ("rates.png", plot_rates),
    (None, plot_rates_by_group),
    ("failures.png", plot_failures),
    ("config.png", plot_config),
    ("training.png", plot_training),
    ("signal.png", plot_signal),
    ("bench.png", plot_bench),
)


def plots_of(run: RunView) -> list[tuple[str, Callable[[RunView, Path], Path | None]]]:
    """The plots to try for ``run``, each with its file name."""
    out = []
    for name, plot in PLOTS:
        name = name if name is not None else group_plot_name(run)
        if name is not None:
            out.append((name, plot))
    return out
