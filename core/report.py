"""One run as a page people want to read: report.html plus the PNGs it shows.

Everything comes from the run directory (see :mod:`envengineer.runview`), so a report
can be made at any time, of a partial run too: sections without data say so and are
otherwise left out. matplotlib (extra ``report``) is imported only when plotting, on
the Agg canvas, never through pyplot's global state.
"""

from __future__ import annotations

import datetime as _dt
import html
import io
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from envengineer.errors import EnvEngineerError
from envengineer.runview import SUBSETS, RunView, Stage, bench_label, design_alarm, load_run, paired_with_base, rate, sort_keys, subset_sum

REPORT_HTML = "report.html"
IMAGE_DIR = "report"
METRICS = ("valid", "optimal")

#: Plot files this module may write; ones not made this time are removed (stale).
PLOT_NAMES = ("rates.png", "rates_by_size.png", "failures.png", "config.png", "training.png", "bench.png")


@dataclass
class Report:
    html: Path
    images: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


# ==================================================================== plots

_PALETTE = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#db2777", "#0891b2", "#65a30d", "#4b5563", "#b45309"]
_STYLE = {
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.25,
    "grid.linestyle": "-",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.labelcolor": "#374151",
    "xtick.color": "#4b5563",
    "ytick.color": "#4b5563",
    "axes.edgecolor": "#9ca3af",
    "legend.frameon": False,
    "legend.fontsize": 8,
    "savefig.dpi": 120,
}


def _new_figure(width: float, height: float, nrows: int = 1, ncols: int = 1):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise EnvEngineerError("the report needs matplotlib: pip install 'envengineer[report]'") from None
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _save(fig: Any, path: Path) -> Path:
    from envengineer.fileio import atomic_open

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", facecolor="white")
    with atomic_open(path, "wb") as handle:
        handle.write(buffer.getvalue())
    return path


def _percent_axis(ax: Any, top: float = 100) -> None:
    ax.set_ylim(0, top * 1.04)
    ax.yaxis.set_major_formatter(lambda v, _pos: f"{v:.0f}%")


def _evaluated(run: RunView) -> list[Stage]:
    return [s for s in run.stages if s.eval is not None]


def plot_rates(run: RunView, path: Path) -> Path | None:
    """Overall valid and optimal rate per stage, with standard-error bars."""
    stages = _evaluated(run)
    if not stages:
        return None
    fig, axes = _new_figure(6.4, 3.4)
    ax = axes[0][0]
    x = list(range(len(stages)))
    for (metric, color), dy in zip(zip(METRICS, _PALETTE), (4, -11)):
        y = [100 * (rate(s.eval, f"{metric}_rate") or 0) for s in stages]
        err = [100 * (rate(s.eval, f"{metric}_se") or 0) for s in stages]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, lw=2, color=color, label=f"{metric} rate")
        for xi, yi in zip(x, y):
            ax.annotate(f"{yi:.1f}", (xi, yi), textcoords="offset points", xytext=(7, dy), ha="left", fontsize=7, color=color)
    ax.set_xlim(-0.3, len(stages) - 0.5)
    ax.set_xticks(x, [s.title for s in stages])
    _percent_axis(ax)
    ax.set_title("validation: overall (± standard error)")
    ax.legend(loc="lower right")
    return _save(fig, path)


def plot_rates_by_size(run: RunView, path: Path) -> Path | None:
    """Valid and optimal rate per map size, one line per size across stages."""
    stages = _evaluated(run)
    sizes = sort_keys({k for s in stages for k in ((s.eval or {}).get("by") or {}).get("size", {})})
    if not stages or not sizes:
        return None
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    fig, axes = _new_figure(10.5, 3.6, ncols=2)
    x = list(range(len(stages)))
    for ax, metric in zip(axes[0], METRICS):
        for i, size in enumerate(sizes):
            y = [rate(s.eval, f"{metric}_rate", "size", size) for s in stages]
            err = [rate(s.eval, f"{metric}_se", "size", size) for s in stages]
            points = [(xi, 100 * yi, 100 * (ei or 0)) for xi, yi, ei in zip(x, y, err) if yi is not None]
            if not points:
                continue
            px, py, pe = zip(*points)
            color = cmap(i / max(1, len(sizes) - 1) * 0.9)
            ax.errorbar(px, py, yerr=pe, marker="o", ms=4, capsize=2, lw=1.6, color=color, label=size)
        ax.set_xticks(x, [s.title for s in stages])
        _percent_axis(ax)
        ax.set_title(f"validation {metric} rate by map size")
    axes[0][1].legend(title="size", loc="center left", bbox_to_anchor=(1.0, 0.5))
    return _save(fig, path)


def _failure_types(stages: Sequence[Stage]) -> list[str]:
    totals: dict[str, int] = {}
    for s in stages:
        for name, count in ((s.eval or {}).get("overall", {}).get("failures") or {}).items():
            totals[name] = totals.get(name, 0) + int(count or 0)
    return sorted(totals, key=lambda n: (-totals[n], n))


def plot_failures(run: RunView, path: Path) -> Path | None:
    """Failure types per stage as stacked bars (share of validation instances)."""
    stages = _evaluated(run)
    types = _failure_types(stages)
    if not stages or not types:
        return None
    fig, axes = _new_figure(6.4, 3.4)
    ax = axes[0][0]
    x = list(range(len(stages)))
    bottom = [0.0] * len(stages)
    for name, color in zip(types, _PALETTE * 3):
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
    return _save(fig, path)


CONFIG_FIELDS = (("ratio", "Blues"), ("hole_ratio", "Oranges"), ("wait_ratio", "Purples"))


def _config_stages(run: RunView) -> list[Stage]:
    return [s for s in run.rounds if isinstance((s.config or {}).get("sizes"), dict)]


def plot_config(run: RunView, path: Path) -> Path | None:
    """The generator config per round: one heatmap per field, sizes × rounds."""
    stages = _config_stages(run)
    if not stages:
        return None
    sizes = sort_keys({k for s in stages for k in s.config["sizes"]})  # type: ignore[index]
    width = 3 * (1.6 + 0.62 * len(stages)) + 1.0
    fig, axes = _new_figure(width, 0.36 * len(sizes) + 1.4, ncols=3)
    for ax, (name, cmap) in zip(axes[0], CONFIG_FIELDS):
        grid = []
        for size in sizes:
            row = []
            for s in stages:
                value = ((s.config or {})["sizes"].get(size) or {}).get(name)
                row.append(float(value) if isinstance(value, (int, float)) else float("nan"))
            grid.append(row)
        finite = [v for row in grid for v in row if v == v]
        vmin, vmax = (min(finite), max(finite)) if finite else (0.0, 1.0)
        if vmax - vmin < 1e-9:  # a field left alone: a flat mid tone, not a saturated block
            vmin, vmax = 0.0, (2 * vmax if vmax > 0 else 1.0)
        image = ax.imshow(grid, cmap=cmap, aspect="auto", vmin=vmin, vmax=vmax)
        for i, row in enumerate(grid):
            for j, value in enumerate(row):
                if value == value:
                    ax.text(j, i, f"{value:.3f}".rstrip("0").rstrip(".") if value else "0", ha="center", va="center",
                            fontsize=7, color="white" if value > vmin + 0.6 * (vmax - vmin) else "#111827")
        ax.set_xticks(range(len(stages)), [s.label for s in stages])
        ax.set_yticks(range(len(sizes)), sizes)
        ax.set_xlabel("round")
        ax.grid(False)
        ax.set_title(name)
        fig.colorbar(image, ax=ax, shrink=0.8)
    return _save(fig, path)


CURVE_PANELS = (
    ("reward_mean", "reward (mean ± std)"),
    ("zero_std_frac", "share of zero-variance groups"),
    ("kl", "KL"),
    ("completion_length", "completion length"),
)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value else None


def plot_training(run: RunView, path: Path) -> Path | None:
    """Training curves of every round on one step axis, round boundaries marked."""
    stages = [s for s in run.rounds if s.curves]
    panels = [(k, t) for k, t in CURVE_PANELS if any(_number(r.get(k)) is not None for s in stages for r in s.curves)]
    if not stages or not panels:
        return None
    ncols = 2 if len(panels) > 1 else 1
    nrows = (len(panels) + 1) // 2 if ncols == 2 else 1
    fig, axes = _new_figure(10.5 if ncols == 2 else 6.4, 3.0 * nrows, nrows=nrows, ncols=ncols)
    flat = [ax for row in axes for ax in row]
    for ax in flat[len(panels):]:
        ax.set_visible(False)
    offset = 0.0
    spans = []
    for s in stages:
        steps = [_number(r.get("step")) for r in s.curves]
        steps = [st if st is not None else float(i + 1) for i, st in enumerate(steps)]
        spans.append((s, [offset + st for st in steps]))
        offset += max(steps) if steps else 0
    for ax, (key, title) in zip(flat, panels):
        for (s, xs), color in zip(spans, _PALETTE * 3):
            points = [(x, _number(r.get(key)), _number(r.get("reward_std"))) for x, r in zip(xs, s.curves)]
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
    return _save(fig, path)


def _bench_stages(run: RunView) -> list[Stage]:
    return [s for s in run.stages if s.bench]


def plot_bench(run: RunView, path: Path) -> Path | None:
    """Benchmark valid (light) and optimal (dark) rate per subset, per stage that ran it."""
    names = [n for n in run.bench_names() if any(n in s.bench for s in run.stages)]
    if not names:
        return None
    fig, axes = _new_figure(max(6.4, 3.9 * len(names)), 3.5, ncols=len(names))
    stage_colors = {s.label: c for s, c in zip(_bench_stages(run), _PALETTE * 3)}
    for ax, name in zip(axes[0], names):
        stages = [s for s in run.stages if name in s.bench]
        subsets = sort_keys({k for s in stages for k in ((s.bench[name].get("by") or {}).get("subset") or {})})
        groups = [*subsets, "all"]
        width = 0.8 / len(stages)
        for j, s in enumerate(stages):
            xs = [g + (j - (len(stages) - 1) / 2) * width for g in range(len(groups))]
            summary = s.bench[name]
            for metric, alpha in (("valid", 0.35), ("optimal", 1.0)):
                values = [rate(summary, f"{metric}_rate", "subset", g) if g != "all" else rate(summary, f"{metric}_rate") for g in groups]
                ys = [100 * (v or 0) for v in values]
                ax.bar(xs, ys, width=width * 0.92, color=stage_colors[s.label], alpha=alpha, label=f"{s.title}" if metric == "valid" else None)
        ax.set_xticks(range(len(groups)), groups)
        _percent_axis(ax)
        ax.set_title(f"{bench_label(name)} ({name})")
    axes[0][0].legend(loc="upper right", title="light: valid, dark: optimal", title_fontsize=7)
    return _save(fig, path)


PLOTS: tuple[tuple[str, Callable[[RunView, Path], Path | None]], ...] = (
    ("rates.png", plot_rates),
    ("rates_by_size.png", plot_rates_by_size),
    ("failures.png", plot_failures),
    ("config.png", plot_config),
    ("training.png", plot_training),
    ("bench.png", plot_bench),
)


# ==================================================================== html

_CSS = """
:root { --fg:#111827; --muted:#6b7280; --line:#e5e7eb; --bg:#f9fafb; --accent:#2563eb; --bad:#b91c1c; --good:#047857; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.5 -apple-system, BlinkMacSystemFont, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color:var(--fg); background:var(--bg); }
main { max-width: 1180px; margin: 0 auto; padding: 28px 24px 64px; }
header h1 { margin: 0 0 4px; font-size: 26px; }
header .sub { color: var(--muted); }
section { background:#fff; border:1px solid var(--line); border-radius:10px; padding:18px 22px; margin-top:20px; }
h2 { margin: 0 0 12px; font-size: 18px; }
h3 { margin: 18px 0 8px; font-size: 15px; }
.badge { display:inline-block; padding:1px 8px; border-radius:999px; font-size:12px; font-weight:600; background:#e0e7ff; color:#3730a3; margin-left:6px; vertical-align:middle; }
.badge.partial, .badge.fallback { background:#fef3c7; color:#92400e; }
.badge.ok { background:#d1fae5; color:#065f46; }
.facts { display:grid; grid-template-columns: repeat(auto-fill, minmax(250px, 1fr)); gap: 8px 24px; margin: 0; }
.facts div { border-bottom:1px dashed var(--line); padding:3px 0; }
.facts dt { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.04em; }
.facts dd { margin:0; font-weight:500; word-break: break-word; }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { padding: 5px 10px; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
th { background:#f3f4f6; font-weight:600; position: sticky; top: 0; }
th:first-child, td:first-child, td.text, th.text { text-align: left; }
td.wrap { white-space: normal; text-align: left; min-width: 240px; }
tbody tr:hover { background:#f9fafb; }
.scroll { overflow-x: auto; }
.pos { color: var(--good); } .neg { color: var(--bad); }
.se { color: var(--muted); font-size: 11px; }
img { max-width: 100%; height: auto; display:block; margin: 8px 0 4px; }
.note { white-space: pre-wrap; background:#f8fafc; border-left: 3px solid var(--accent); padding: 8px 12px; margin: 6px 0 10px; }
.empty { color: var(--muted); font-style: italic; }
.problems { background:#fef2f2; border-color:#fecaca; }
.alarm { background:var(--bad); color:#fff; border-color:var(--bad); }
.alarm.warn { background:#fef3c7; color:#92400e; border-color:#fcd34d; }
.alarm h2 { margin-bottom:4px; }
.alarm p { margin:0; }
pre { background:#f3f4f6; padding:10px 12px; border-radius:6px; overflow-x:auto; font-size:12px; }
details summary { cursor:pointer; color: var(--accent); margin-top: 6px; }
.round { border-top: 1px solid var(--line); padding-top: 6px; }
nav { margin-top: 14px; font-size: 13px; color: var(--muted); }
nav a { color: var(--accent); text-decoration: none; }
nav a:hover { text-decoration: underline; }
footer { color: var(--muted); font-size: 12px; margin-top: 24px; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _pct(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{100 * value:.{digits}f}%"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, raw: bool = False, classes: Sequence[str] = ()) -> str:
    """An HTML table; cells are escaped unless ``raw`` (then they are trusted HTML)."""
    cls = list(classes) + [""] * (len(headers) - len(classes))
    head = "".join(f'<th class="{c}">{_e(h)}</th>' for h, c in zip(headers, cls))
    body = "".join(
        "<tr>" + "".join(f'<td class="{c}">{cell if raw else _e(cell)}</td>' for cell, c in zip(row, cls)) + "</tr>" for row in rows
    )
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _short(value: Any) -> str:
    """A config section in one line: ``trl (epochs=3, beta=0.001)``."""
    if isinstance(value, dict):
        name = value.get("name")
        rest = ", ".join(f"{k}={_short(v)}" for k, v in value.items() if k != "name")
        if name is not None:
            return f"{name} ({rest})" if rest else str(name)
        return rest or "–"
    if isinstance(value, list):
        return ", ".join(_short(v) for v in value) or "–"
    return "–" if value is None else str(value)


def _header(run: RunView) -> str:
    evaluated = [s for s in run.rounds if s.eval is not None]
    planned = run.rounds_planned
    if planned is not None and len(evaluated) >= planned:
        status = '<span class="badge ok">complete</span>'
    else:
        of = f" of {planned}" if planned is not None else ""
        status = f'<span class="badge partial">partial: {len(evaluated)}{of} rounds evaluated</span>'
    task = run.config.get("task")
    evals = run.config.get("eval") if isinstance(run.config.get("eval"), dict) else {}
    facts = [
        ("task", _short(task)),
        ("rounds", f"{len(run.rounds)} on disk" + (f" / {planned} planned" if planned is not None else "")),
        ("seed", _short(run.config.get("seed"))),
        ("budget", _short(run.config.get("budget"))),
        ("engineer", _short(run.config.get("engineer"))),
        ("context", _short(run.config.get("context"))),
        ("trainer", _short(run.config.get("trainer"))),
        ("policy", _short(run.config.get("policy"))),
        ("validation", _short(evals.get("validation"))),
        ("benchmarks", _short(evals.get("benchmarks"))),
    ]
    grid = "".join(f"<div><dt>{_e(k)}</dt><dd>{_e(v)}</dd></div>" for k, v in facts)
    full = _e(yaml.safe_dump(run.config, sort_keys=False, allow_unicode=True)) if run.config else "(no run.yaml)"
    return (
        f'<header><h1>{_e(run.name)} {status}</h1><div class="sub">{_e(run.path.resolve())}</div></header>'
        f'<section id="config"><h2>Run config</h2><dl class="facts">{grid}</dl>'
        f"<details><summary>run.yaml</summary><pre>{full}</pre></details></section>"
    )


def _img(images: dict[str, Path], name: str, alt: str) -> str:
    if name not in images:
        return ""
    return f'<img src="{IMAGE_DIR}/{_e(name)}" alt="{_e(alt)}">'


def _delta(value: float | None, base: float | None) -> str:
    if value is None or base is None:
        return "–"
    d = 100 * (value - base)
    cls = "pos" if d > 0.05 else "neg" if d < -0.05 else ""
    return f'<span class="{cls}">{d:+.1f}</span>'


def _rate_cell(summary: dict[str, Any] | None, metric: str, *path: str) -> str:
    value = rate(summary, f"{metric}_rate", *path)
    if value is None:
        return "–"
    se = rate(summary, f"{metric}_se", *path)
    return f"{100 * value:.1f}%" + (f' <span class="se">±{100 * se:.1f}</span>' if se else "")


def _shade(value: float | None) -> str:
    """A background from red (0%) through amber to green (100%), light enough to read on."""
    if value is None:
        return ""
    hue = round(120 * max(0.0, min(1.0, value)))
    return f' style="background:hsl({hue},70%,92%)"'


def _paired(stage: Stage, base: Stage) -> str:
    change = paired_with_base(stage.verdicts, base.verdicts)
    return _e(f"+{change['gained']} −{change['lost']} (p = {change['p']:.3f})") if change else "–"


def _validation(run: RunView, images: dict[str, Path]) -> str:
    stages = _evaluated(run)
    if not stages:
        return '<section id="validation"><h2>Validation</h2><p class="empty">No validation summary yet.</p></section>'
    base = run.base.eval
    rows = []
    for s in stages:
        overall = s.eval.get("overall", {})  # type: ignore[union-attr]
        failures = overall.get("failures") or {}
        top = max(failures, key=failures.get) if failures else None
        rows.append([
            _e(s.title), _e(overall.get("n", "–")), _rate_cell(s.eval, "valid"), _rate_cell(s.eval, "optimal"),
            _delta(rate(s.eval, "valid_rate"), rate(base, "valid_rate")) if s.index is not None else "",
            _delta(rate(s.eval, "optimal_rate"), rate(base, "optimal_rate")) if s.index is not None else "",
            _paired(s, run.base) if s.index is not None else "",
            _e(f"{top} ({failures[top]})") if top else "–",
        ])
    parts = [
        '<section id="validation"><h2>Validation</h2>',
        _img(images, "rates.png", "valid and optimal rate per round"),
        _table(["stage", "n", "valid", "optimal", "Δ valid vs base (pts)", "Δ optimal vs base (pts)",
                "vs base, same instances: +solved −lost (sign test p)", "top failure"], rows, raw=True),
        _img(images, "rates_by_size.png", "valid and optimal rate per size and round"),
    ]
    settings = (stages[-1].eval or {}).get("settings")
    if isinstance(settings, dict) and settings:
        parts.insert(3, f"<p class='se'>evaluation settings ({_e(stages[-1].title)}): {_e(_short(settings))}</p>")
    for dimension, title in (("size", "by map size"), ("hole_ratio", "by hole ratio"), ("subset", "by subset")):
        keys = sort_keys({k for s in stages for k in ((s.eval or {}).get("by") or {}).get(dimension, {})})
        if not keys:
            continue
        grid = []
        for key in keys:
            row = [_e(key)]
            for s in stages:
                valid = rate(s.eval, "valid_rate", dimension, key)
                optimal = rate(s.eval, "optimal_rate", dimension, key)
                row.append(f"<span{_shade(valid)}>{_pct(valid)}</span> / {_pct(optimal)}" if valid is not None else "–")
            grid.append(row)
        parts.append(f"<h3>{_e(title)} <span class='se'>(valid / optimal)</span></h3>")
        parts.append(_table([dimension, *[s.title for s in stages]], grid, raw=True))
    parts.append("</section>")
    return "".join(parts)


def _failures(run: RunView, images: dict[str, Path]) -> str:
    stages = _evaluated(run)
    types = _failure_types(stages)
    if not types:
        return ""
    rows = []
    for name in types:
        rows.append([name, *[str(((s.eval or {}).get("overall", {}).get("failures") or {}).get(name, 0)) for s in stages]])
    rows.append(["n (instances)", *[str((s.eval or {}).get("overall", {}).get("n", "–")) for s in stages]])
    return (
        '<section id="failures"><h2>Failure types</h2>'
        + _img(images, "failures.png", "failure types per round")
        + _table(["failure type", *[s.title for s in stages]], rows)
        + "</section>"
    )


def _config(run: RunView, images: dict[str, Path]) -> str:
    stages = _config_stages(run)
    if not stages:
        return ""
    raw = "".join(
        f"<h3>round {_e(s.label)}</h3><pre>{_e(yaml.safe_dump(s.config, sort_keys=False))}</pre>" for s in stages
    )
    return (
        '<section id="generator"><h2>Generator config per round</h2>'
        + _img(images, "config.png", "generator config heatmaps")
        + f"<details><summary>config.yaml of each round</summary>{raw}</details></section>"
    )


def _durations(run: RunView) -> dict[tuple[Any, str], float]:
    out: dict[tuple[Any, str], float] = {}
    for line in run.history:
        value = _number(line.get("duration_s"))
        if value is not None and isinstance(line.get("step"), str):
            out[(line.get("round"), line["step"])] = value
    return out


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}g}"


def _training(run: RunView, images: dict[str, Path]) -> str:
    stages = [s for s in run.rounds if s.curves]
    if not stages:
        return ""
    durations = _durations(run)
    rows = []
    for s in stages:
        def series(key: str) -> list[float]:
            return [v for r in s.curves if (v := _number(r.get(key))) is not None]

        reward, zero, kl, length = series("reward_mean"), series("zero_std_frac"), series("kl"), series("completion_length")
        seconds = durations.get((s.index, "train"))
        rows.append([
            s.label, str(len(s.curves)),
            f"{_fmt(reward[0])} → {_fmt(reward[-1])}" if reward else "–",
            _fmt(sum(zero) / len(zero)) if zero else "–",
            _fmt(kl[-1]) if kl else "–",
            _fmt(length[-1], 4) if length else "–",
            f"{seconds / 60:.1f} min" if seconds is not None else "–",
        ])
    return (
        '<section id="training"><h2>Training</h2>'
        + _img(images, "training.png", "training curves")
        + _table(["round", "logged steps", "reward (first → last)", "zero-variance share (mean)", "KL (last)", "length (last)", "train time"], rows)
        + "</section>"
    )


def _engineer(run: RunView) -> str:
    stages = [s for s in run.rounds if s.summary_md or s.projection]
    if not stages:
        return ""
    parts = ['<section id="engineer"><h2>Engineer</h2>']
    for s in stages:
        p = s.projection or {}
        badge = '<span class="badge fallback">fallback</span>' if p.get("fallback") else ""
        parts.append(f'<div class="round"><h3>round {_e(s.label)} → next config {badge}</h3>')
        if s.summary_md:
            parts.append(f'<div class="note">{_e(s.summary_md)}</div>')
        if p:
            if p.get("reason"):
                parts.append(f"<p><b>reason:</b> {_e(p['reason'])}</p>")
            changes = [c for c in p.get("changes") or [] if isinstance(c, dict)]
            if changes:
                parts.append(_table(
                    ["field", "proposed", "applied", "reason"],
                    [[str(c.get("field", "")), _short(c.get("proposed")), _short(c.get("applied")), str(c.get("reason", ""))] for c in changes],
                    classes=["text", "", "", "wrap"],
                ))
            elif "changes" in p:
                parts.append('<p class="empty">The projection changed nothing in the proposal.</p>')
            accepted = p.get("accepted")
            if isinstance(accepted, list):
                parts.append(f"<p><b>accepted:</b> {_e(', '.join(map(str, accepted)) or 'none')}</p>")
        parts.append("</div>")
    parts.append("</section>")
    return "".join(parts)


def _bench(run: RunView, images: dict[str, Path]) -> str:
    names = [n for n in run.bench_names() if any(n in s.bench for s in run.stages)]
    if not names:
        return ""
    parts = ['<section id="benchmarks"><h2>Benchmarks</h2>', _img(images, "bench.png", "benchmark results")]
    for name in names:
        stages = [s for s in run.stages if name in s.bench]
        subsets = sort_keys({k for s in stages for k in ((s.bench[name].get("by") or {}).get("subset") or {})}) or list(SUBSETS)
        headers = ["stage", "n", "valid", "optimal"]
        for sub in subsets:
            headers += [f"{sub} valid", f"{sub} optimal"]
        headers += ["Σ valid", "Σ optimal"]
        rows = []
        for s in stages:
            summary = s.bench[name]
            row = [_e(s.title), _e(summary.get("overall", {}).get("n", "–")), _rate_cell(summary, "valid"), _rate_cell(summary, "optimal")]
            for sub in subsets:
                row += [_pct(rate(summary, "valid_rate", "subset", sub)), _pct(rate(summary, "optimal_rate", "subset", sub))]
            for metric in METRICS:
                total = subset_sum(summary, f"{metric}_rate", tuple(subsets))
                row.append("–" if total is None else f"{total:.1f}")
            rows.append(row)
        parts.append(f"<h3>{_e(bench_label(name))} <span class='se'>{_e(name)}</span></h3>")
        parts.append(_table(headers, rows, raw=True))
    parts.append("<p class='se'>Σ: the paper's Sum of per-subset rates (out of 300).</p></section>")
    return "".join(parts)


def _timeline(run: RunView) -> str:
    if not run.history:
        return ""
    rows = [
        ["base" if line.get("round") is None else f"{line.get('round'):02d}" if isinstance(line.get("round"), int) else str(line.get("round")),
         str(line.get("step", "")), str(line.get("time", "")),
         _fmt(_number(line.get("duration_s")), 4) if _number(line.get("duration_s")) is not None else "–"]
        for line in run.history
    ]
    total = sum(v for line in run.history if (v := _number(line.get("duration_s"))) is not None)
    return (
        f'<section id="timeline"><h2>Timeline</h2><p>{len(rows)} finished steps, {total / 60:.1f} min in all.</p>'
        f"<details><summary>history.jsonl</summary>{_table(['round', 'step', 'finished', 'seconds'], rows, classes=['text', 'text', 'text', ''])}</details></section>"
    )


def _alarm(run: RunView) -> str:
    """A banner when design steps fell back; red when every one did (a void experiment) or the run was stopped for it."""
    steps = run.design_steps()
    alarm = design_alarm([(fell, reason) for _, fell, reason, _ in steps], halted=any(halted for *_, halted in steps))
    if alarm is None:
        return ""
    cls = "alarm" if alarm.failed else "alarm warn"
    return f'<section id="fallbacks" class="{cls}"><h2>{_e(alarm.headline)}</h2><p>{_e(alarm.detail)}</p></section>'


def _problems(problems: Sequence[str]) -> str:
    if not problems:
        return ""
    items = "".join(f"<li>{_e(p)}</li>" for p in problems)
    return f'<section id="problems" class="problems"><h2>Could not read</h2><ul>{items}</ul></section>'


def render_html(run: RunView, images: dict[str, Path], problems: Sequence[str] = ()) -> str:
    """The report page; ``images`` maps plot file names (in ``report/``) to the files written."""
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sections = "".join([
        _problems(problems), _validation(run, images), _failures(run, images), _config(run, images),
        _training(run, images), _engineer(run), _bench(run, images), _timeline(run),
    ])
    links = " · ".join(f'<a href="#{i}">{t}</a>' for i, t in re.findall(r'<section id="([\w-]+)"[^>]*><h2>([^<]+)</h2>', sections))
    body = _header(run) + _alarm(run) + (f'<nav>{links}</nav>' if links else "") + sections
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(run.name)}: envengineer report</title><style>{_CSS}</style></head>"
        f"<body><main>{body}<footer>made by envengineer report, {now}</footer></main></body></html>\n"
    )


def _readable(*paths: Path) -> None:
    """Give report files the usual mode (0666 less umask): they are meant to be shared or served."""
    import os

    mask = os.umask(0)
    os.umask(mask)
    for path in paths:
        os.chmod(path, 0o666 & ~mask)


def write_report(run_dir: str | Path) -> Report:
    """Write ``RUN_DIR/report.html`` and its PNGs in ``RUN_DIR/report/``, each atomically."""
    from envengineer.fileio import write_text

    run = load_run(run_dir)
    image_dir = run.path / IMAGE_DIR
    problems = list(run.problems)
    images: dict[str, Path] = {}
    for name, plot in PLOTS:
        try:
            written = plot(run, image_dir / name)
        except EnvEngineerError:
            raise
        except Exception as exc:  # one odd file must not cost the whole report
            problems.append(f"plot {name}: {type(exc).__name__}: {exc}")
            written = None
        if written is not None:
            images[name] = written
    for name in PLOT_NAMES:
        if name not in images and (stale := image_dir / name).is_file():
            stale.unlink()
    html_path = run.path / REPORT_HTML
    write_text(html_path, render_html(run, images, problems))
    _readable(html_path, *images.values())
    return Report(html=html_path, images=list(images.values()), problems=problems)
