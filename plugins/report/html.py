"""The report page's HTML: one function per section, each drawn from a :class:`~envengineer.plugins.report.view.RunView`.

Sections without data are left out. Tables per group, per subset and the aggregate come from
what the run's task and benchmarks declare (see :mod:`envengineer.plugins.report.drawn`); a task adds
sections of its own through the ``report_sections`` hook (see :mod:`envengineer.plugins.report.page`).
"""

from __future__ import annotations

import datetime as _dt
import html
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from envengineer.plugins.report.drawn import BenchView, aggregate_notes
from envengineer.plugins.report.plots import METRICS, benched, config_stages, evaluated, failure_types, group_plot_name, number
from envengineer.plugins.report.view import RunView, Stage, rate
from envengineer.store.records import design_alarm, paired_with_base

IMAGE_DIR = "report"

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


def _validation_view(run: RunView, stages: Sequence[Stage]) -> BenchView | None:
    """The validation set as a benchmark when it declares an aggregate (MAPF: the Sum over its
    wait-ratio subsets) that some stage's summary holds; else None."""
    if not run.validation_set:
        return None
    view = run.bench(run.validation_set)
    if view.aggregate is None or not any(view.figure(s.eval, m) is not None for s in stages for m in METRICS):
        return None
    return view


def _aggregate_cells(view: BenchView, summary: dict[str, Any] | None) -> list[str]:
    """A set's declared aggregate of each metric, in percent (``–`` where the summary lacks it)."""
    return ["–" if (total := view.figure(summary, metric)) is None else f"{total:.1f}" for metric in METRICS]


def _validation(run: RunView, images: dict[str, Path]) -> str:
    stages = evaluated(run)
    if not stages:
        return '<section id="validation"><h2>Validation</h2><p class="empty">No validation summary yet.</p></section>'
    base = run.base.eval
    view = _validation_view(run, stages)
    rows = []
    for s in stages:
        overall = s.eval.get("overall", {})  # type: ignore[union-attr]
        failures = overall.get("failures") or {}
        top = max(failures, key=failures.get) if failures else None
        rows.append([
            _e(s.title), _e(overall.get("n", "–")), _rate_cell(s.eval, "valid"), _rate_cell(s.eval, "optimal"),
            *(_aggregate_cells(view, s.eval) if view is not None else []),
            _delta(rate(s.eval, "valid_rate"), rate(base, "valid_rate")) if s.index is not None else "",
            _delta(rate(s.eval, "optimal_rate"), rate(base, "optimal_rate")) if s.index is not None else "",
            _paired(s, run.base) if s.index is not None else "",
            _e(f"{top} ({failures[top]})") if top else "–",
        ])
    parts = [
        '<section id="validation"><h2>Validation</h2>',
        _img(images, "rates.png", "valid and optimal rate per round"),
        _table(["stage", "n", "valid", "optimal", *([f"{view.symbol} {metric}" for metric in METRICS] if view is not None else []),
                "Δ valid vs base (pts)", "Δ optimal vs base (pts)",
                "vs base, same instances: +solved −lost (sign test p)", "top failure"], rows, raw=True),
        f"<p class='se'>{_e(view.note())}.</p>" if view is not None else "",
        _img(images, group_plot_name(run) or "", f"valid and optimal rate per {run.primary().title if run.primary() else 'group'} and round"),
    ]
    settings = (stages[-1].eval or {}).get("settings")
    if isinstance(settings, dict) and settings:
        parts.insert(4, f"<p class='se'>evaluation settings ({_e(stages[-1].title)}): {_e(_short(settings))}</p>")
    for dimension in run.dimensions():
        keys = dimension.keys({k for s in stages for k in ((s.eval or {}).get("by") or {}).get(dimension.name, {})})
        if not keys:
            continue
        grid = []
        for key in keys:
            row = [_e(key)]
            for s in stages:
                valid = rate(s.eval, "valid_rate", dimension.name, key)
                optimal = rate(s.eval, "optimal_rate", dimension.name, key)
                row.append(f"<span{_shade(valid)}>{_pct(valid)}</span> / {_pct(optimal)}" if valid is not None else "–")
            grid.append(row)
        parts.append(f"<h3>by {_e(dimension.title.replace('_', ' '))} <span class='se'>(valid / optimal)</span></h3>")
        parts.append(_table([dimension.title, *[s.title for s in stages]], grid, raw=True))
    parts.append("</section>")
    return "".join(parts)


def _failures(run: RunView, images: dict[str, Path]) -> str:
    stages = evaluated(run)
    types = failure_types(stages)
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
    stages = [s for s, _ in config_stages(run)]
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
        value = number(line.get("duration_s"))
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
            return [v for r in s.curves if (v := number(r.get(key))) is not None]

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


def _signal(run: RunView, images: dict[str, Path]) -> str:
    """The training signal per round: sampled success on the round's own prompts, by the primary grouping."""
    stages = [s for s in run.rounds if s.signal]
    primary = run.primary()
    if not stages:
        return ""
    rows = []
    for s in stages:
        overall = (s.signal or {}).get("overall") or {}
        rows.append([_e(s.title), _e(overall.get("prompts", "–")), _e(overall.get("samples", "–")), _pct(overall.get("success")),
                     _e(overall.get("mixed", "–")), _e(overall.get("all_right", "–")), _e(overall.get("all_wrong", "–")), _e(overall.get("kept", "–"))])
    parts = [
        '<section id="signal"><h2>Training signal</h2>',
        "<p>What the trainer sampled on each round's own training prompts (<code>train/rollouts.jsonl</code>): sampled "
        "success, and the prompts with mixed outcomes, the ones GRPO learns from.</p>",
        _img(images, "signal.png", "training signal per round"),
        _table(["round", "prompts", "samples", "sampled success", "mixed", "all right", "all wrong", "trained on"], rows, raw=True),
    ]
    if primary is not None:
        keys = primary.keys({k for s in stages for k in ((s.signal or {}).get("by") or {}).get(primary.name, {})})
        grid = []
        for key in keys:
            row = [_e(key)]
            for s in stages:
                cell = (((s.signal or {}).get("by") or {}).get(primary.name) or {}).get(key)
                value = cell.get("success") if isinstance(cell, dict) else None
                row.append(f"<span{_shade(value)}>{_pct(value)}</span> ({_e(cell.get('prompts', 0))})" if value is not None else "–")
            grid.append(row)
        if grid:
            parts.append(f"<h3>sampled success by {_e(primary.title.replace('_', ' '))} <span class='se'>(prompts)</span></h3>")
            parts.append(_table([primary.title, *[s.title for s in stages]], grid, raw=True))
    parts.append("</section>")
    return "".join(parts)


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


def _bench_table(view: BenchView, summaries: Sequence[tuple[Stage, dict[str, Any]]]) -> str:
    """One set's table: a row per stage, its overall rates, its subsets' and its aggregate."""
    subsets = view.subset_keys(summary for _, summary in summaries) or (list(view.subsets.order) if view.subsets is not None else [])
    headers = ["stage", "n", "valid", "optimal"]
    for sub in subsets:
        headers += [f"{sub} valid", f"{sub} optimal"]
    if view.aggregate is not None:
        headers += [f"{view.symbol} {metric}" for metric in METRICS]
    rows = []
    for s, summary in summaries:
        row = [_e(s.title), _e(summary.get("overall", {}).get("n", "–")), _rate_cell(summary, "valid"), _rate_cell(summary, "optimal")]
        for sub in subsets:
            row += [_pct(rate(summary, "valid_rate", view.subsets.name, sub)), _pct(rate(summary, "optimal_rate", view.subsets.name, sub))]  # type: ignore[union-attr]
        if view.aggregate is not None:
            row += _aggregate_cells(view, summary)
        rows.append(row)
    return _table(headers, rows, raw=True)


def _bench(run: RunView, images: dict[str, Path]) -> str:
    names = benched(run)
    if not names:
        return ""
    parts = ['<section id="benchmarks"><h2>Benchmarks</h2>', _img(images, "bench.png", "benchmark results")]
    views = [run.bench(name) for name in names]
    validation = _validation_view(run, evaluated(run))
    if validation is not None and validation.name not in names:
        # the validation set's aggregate beside the benchmarks', so the sets' headline figures read side by side
        parts.append(f"<h3>{_e(validation.label)} <span class='se'>{_e(validation.name)}, the validation set</span></h3>")
        parts.append(_bench_table(validation, [(s, s.eval) for s in evaluated(run)]))  # type: ignore[misc]
        views.insert(0, validation)
    for name in names:
        view = run.bench(name)
        parts.append(f"<h3>{_e(view.label)} <span class='se'>{_e(name)}</span></h3>")
        parts.append(_bench_table(view, [(s, s.bench[name]) for s in run.stages if name in s.bench]))
    notes = aggregate_notes(views)
    parts.append(f"<p class='se'>{_e(notes)}.</p></section>" if notes else "</section>")
    return "".join(parts)


def _timeline(run: RunView) -> str:
    if not run.history:
        return ""
    rows = [
        ["base" if line.get("round") is None else f"{line.get('round'):02d}" if isinstance(line.get("round"), int) else str(line.get("round")),
         str(line.get("step", "")), str(line.get("time", "")),
         _fmt(number(line.get("duration_s")), 4) if number(line.get("duration_s")) is not None else "–"]
        for line in run.history
    ]
    total = sum(v for line in run.history if (v := number(line.get("duration_s"))) is not None)
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


def _task_sections(sections: Sequence[tuple[str, str]]) -> str:
    """The sections a task contributed (``report_sections`` hook): the title escaped, the body trusted HTML."""
    out = []
    for title, body in sections:
        slug = re.sub(r"[^a-z0-9]+", "-", str(title).lower()).strip("-") or "task"
        out.append(f'<section id="task-{slug}"><h2>{_e(title)}</h2>{body}</section>')
    return "".join(out)


def render_html(run: RunView, images: dict[str, Path], problems: Sequence[str] = (), sections: Sequence[tuple[str, str]] = ()) -> str:
    """The report page; ``images`` maps plot file names (in ``report/``) to the files written,
    ``sections`` are the task's own (title, HTML) sections, shown after the benchmarks."""
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sections_html = "".join([
        _problems(problems), _validation(run, images), _failures(run, images), _config(run, images),
        _training(run, images), _signal(run, images), _engineer(run), _bench(run, images), _task_sections(sections), _timeline(run),
    ])
    links = " · ".join(f'<a href="#{i}">{t}</a>' for i, t in re.findall(r'<section id="([\w-]+)"[^>]*><h2>([^<]+)</h2>', sections_html))
    body = _header(run) + _alarm(run) + (f'<nav>{links}</nav>' if links else "") + sections_html
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(run.name)}: envengineer report</title><style>{_CSS}</style></head>"
        f"<body><main>{body}<footer>made by envengineer report, {now}</footer></main></body></html>\n"
    )

