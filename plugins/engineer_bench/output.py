"""The engineer benchmark's files: ``score.json``, ``proposals.jsonl`` and ``score.png`` in the output folder, each
scored run's own slice in ``<run>/engineer-score/`` and the run report's section that reads it."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envengineer.plugins.engineer_bench.predictions import summarize_predictions
from envengineer.plugins.engineer_bench.recorded import PRIMARY, REFERENCE
from envengineer.plugins.engineer_bench.statistics import summarize

#: where a scored run keeps its slice of each scoring (``<run>/engineer-score/<output name>.json``), for its report
RUN_RECORD_DIR = "engineer-score"


def _record_name(output: Path) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "-", output.resolve().name).strip("-.") or "score"


def record_in_runs(result: Mapping[str, Any], output: str | Path) -> list[Path]:
    """Each scored run's own slice (its rounds' lines summarised, its self-predictions, the settings and where the
    whole result is) in ``<run>/engineer-score/<output name>.json``, and its plot in ``<run>/report/``: what
    ``envengineer report`` shows as the run's engineer-benchmark section."""
    from envengineer.fileio import write_json

    name, written = _record_name(Path(output)), []
    for run in result["runs"]:
        mine = [line for line in result["lines"] if line["run"] == run["path"]]
        predictions = [p for p in result.get("predictions") or [] if p["run"] == run["path"]]
        record = {"output": str(Path(output).resolve()), "settings": result["settings"], "engineers": result["engineers"],
                  "rounds": run["rounds"], "summary": summarize(mine, result["engineers"], seed=result["settings"]["seed"]),
                  "self_prediction": summarize_predictions(predictions, seed=result["settings"]["seed"]) if predictions else None}
        path = Path(run["path"]) / RUN_RECORD_DIR / f"{name}.json"
        write_json(path, record)
        written.append(path)
        try:
            plot({"engineers": result["engineers"], "lines": mine, "summary": record["summary"]},
                 Path(run["path"]) / "report" / f"engineer-score-{name}.png")
        except ImportError:
            pass
    return written


def report_sections(run_dir: str | Path) -> list[tuple[str, str]]:
    """The run report's engineer-benchmark sections: one per scoring recorded in ``<run>/engineer-score/`` (a table per
    engineer: proposals, fallback rate, kept/B and its difference from fixed with their intervals, Σp(1−p), the
    self-prediction's Brier beside its two references; and the plot of the run's proposals)."""
    import html

    folder = Path(run_dir) / RUN_RECORD_DIR
    sections = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            summary, known = record["summary"], record.get("self_prediction") or {}
        except (ValueError, KeyError, TypeError) as exc:
            sections.append((f"Engineer benchmark: {path.stem}", f"<p>{html.escape(str(path))}: unreadable ({html.escape(str(exc))})</p>"))
            continue

        def cell(entry: Any, signed: bool = False) -> str:
            if not isinstance(entry, dict) or entry.get("mean") is None:
                return ""
            ci = entry.get("ci95")
            form = "+.1f" if signed else ".1f"
            return html.escape(f"{entry['mean']:{form}}" + (f" [{ci[0]:{form}}, {ci[1]:{form}}]" if ci else ""))

        settings = record.get("settings", {})
        rows = []
        for name in record.get("engineers", []):
            entry = summary.get(name)
            if not entry:
                continue
            brier = (known.get(name) or {}).get("brier") or {}
            rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in (
                html.escape(str(name)), entry["proposals"], f"{100 * entry['fallback_rate']:.0f}%", cell(entry["kept_per_budget"]),
                cell(entry.get("vs_fixed_kept_per_budget"), signed=True), f"{entry['learnability']['mean']:.3f}",
                "" if brier.get("mean") is None else html.escape(f"{brier['mean']:.3f} (0.5 everywhere {known[name]['brier_half']:.3f})"),
            )) + "</tr>")
        image = f"report/engineer-score-{path.stem}.png"
        body = (f"<p>{html.escape(str(len(record.get('rounds', []))))} rounds scored, K={settings.get('proposals')} proposals, "
                f"M={settings.get('instances')} instances, S={settings.get('draws')} draws (<code>envengineer engineers score</code>; "
                f"the whole result: <code>{html.escape(str(record.get('output')))}</code>). kept/B: expected kept prompts per budget; "
                "− fixed: minus the round's config unchanged; intervals: 95% bootstrap over rounds.</p>"
                "<table><tr><th>engineer</th><th>proposals</th><th>fell back</th><th>kept/B</th><th>− fixed</th><th>Σp(1−p)</th>"
                "<th>self-prediction Brier</th></tr>" + "".join(rows) + "</table>"
                + (f'<p><img src="{html.escape(image)}" alt="proposals scored"></p>' if (Path(run_dir) / image).is_file() else ""))
        sections.append((f"Engineer benchmark: {path.stem}", body))
    return sections


def write_results(result: Mapping[str, Any], output: str | Path) -> list[Path]:
    """``score.json`` (settings, runs, summary, cost) and ``proposals.jsonl`` (one line per scored config), atomically,
    and ``score.png`` when matplotlib is installed; each run's slice for its report (:func:`record_in_runs`)."""
    from envengineer.fileio import write_json, write_jsonl

    out = Path(output)
    written = [out / "score.json", out / "proposals.jsonl"]
    write_json(written[0], {k: v for k, v in result.items() if k not in ("lines", "predictions")})
    write_jsonl(written[1], result["lines"])
    if result.get("predictions") is not None:
        written.append(out / "predictions.jsonl")
        write_jsonl(written[-1], result["predictions"])
    try:
        written.append(plot(result, out / "score.png"))
    except ImportError:
        pass
    written += record_in_runs(result, out)
    return written


def read_results(output: str | Path) -> dict[str, Any]:
    """A finished scoring read back from its folder: ``score.json`` with ``proposals.jsonl`` as ``lines`` (and
    ``predictions.jsonl`` where written), what :func:`write_results` wrote. A missing or malformed file is refused by
    name (and line); a summary figure the file predates is computed from the lines."""
    from envengineer.api import InputError, read_json, read_jsonl

    out = Path(output)
    path = out / "score.json"
    result = read_json(path, missing="not a folder that `envengineer engineers score --output` wrote")
    missing = [key for key in ("settings", "runs", "engineers", "summary") if not isinstance(result, dict) or key not in result]
    if missing:
        raise InputError(f"{path}: not an engineer-benchmark result (no {', '.join(missing)})")
    result["lines"] = read_jsonl(out / "proposals.jsonl")
    if (out / "predictions.jsonl").exists():
        result["predictions"] = read_jsonl(out / "predictions.jsonl")
    # a figure added to the summary after the scoring (the restated share, 2026-12-07) is computed from its lines;
    # what score.json holds is kept as written
    again = summarize(result["lines"], result["engineers"], seed=result["settings"].get("seed", 0))
    for name, entry in again.items():
        stored = result["summary"].setdefault(name, {})
        for key, value in entry.items():
            stored.setdefault(key, value)
    return result


def plot(result: Mapping[str, Any], path: Path) -> Path:
    """Each proposal as a point: its expected kept prompts minus the fixed reference's in the same round, against
    fallback (0: applied, 1: fell back; points spread sideways per engineer), each engineer's mean at its fallback
    rate; the fixed reference is the line at 0."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ImportError("matplotlib") from exc
    from envengineer.plugins._shared.plotting import PALETTE, new_figure, save_figure

    engineers = [e for e in result["engineers"] if e != REFERENCE]
    fig, axes = new_figure(6.4, 4.2)
    ax = axes[0][0]
    ax.axhline(0, color="#111827", lw=1.5, label="fixed (the round's config)")
    width = 0.3
    for i, (engineer, color) in enumerate(zip(engineers, PALETTE * 3)):
        mine = [l for l in result["lines"] if l["engineer"] == engineer]
        offset = (i - (len(engineers) - 1) / 2) * width / max(1, len(engineers))
        rng = random.Random(f"{engineer}")
        xs = [float(l["fallback"]) + offset + rng.uniform(-0.02, 0.02) for l in mine]
        ys = [l["vs_fixed"][PRIMARY] for l in mine]
        ax.scatter(xs, ys, s=14, color=color, alpha=0.45, edgecolors="none")
        entry = result["summary"].get(engineer) or {}
        mean = (entry.get(f"vs_fixed_{PRIMARY}") or {}).get("mean")
        if mean is not None:
            ax.scatter([entry["fallback_rate"]], [mean], s=90, color=color, edgecolors="black", marker="D",
                       label=f"{engineer} (mean)", zorder=3)
    ax.set_xlim(-0.25, 1.25)
    ax.set_xticks([0, 0.5, 1], ["0 (applied)", "0.5", "1 (fell back)"])
    ax.set_xlabel("fallback (points: each proposal; diamonds: the engineer's rate)")
    ax.set_ylabel("expected kept prompts per budget − fixed")
    ax.set_title("engineer benchmark: proposals scored for the round's checkpoint")
    ax.legend(fontsize=7, loc="best")
    return save_figure(fig, path)
