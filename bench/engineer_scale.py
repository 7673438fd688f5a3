#!/usr/bin/env python
"""The engineer scale curve (issue 46, point 3): the engineer benchmark's figures for LLM engineers of three sizes,
each served by llama.cpp, crossed with the reply interface and the decoding, beside the rule engineers, all on the
same recorded rounds; a table and a plot of each figure against parameters.

    python bench/engineer_scale.py --run RUN [--run RUN ...] \\
        --models smollm2-135m-instruct,qwen2.5-coder-0.5b-instruct,qwen2.5-coder-1.5b-instruct \\
        --interfaces config,changes,decisions --decodings greedy,sampled,critic --output bench/results/engineer-scale
    python bench/engineer_scale.py --report bench/results/engineer-scale      # the table and the plot again

A cell is one engineer scored by ``envengineer engineers score``'s code (:func:`envengineer.plugins.engineer_bench.
scoring.score_runs`: each proposal parsed, projected and scored for the round's checkpoint, the round's own config
scored as ``fixed``) on every recorded round of the runs given:

- the rule engineers ``fixed``, ``learnability``, ``rlve`` and ``inverted``, one proposal a round (deterministic);
- per model and interface (``config``, ``changes``, ``decisions``, ``decisions-read`` for decisions with
  ``read_first``: docs/engineers.md#interfaces), the
  ``openai-compatible`` engineer against ``envengineer serve MODEL --server llama.cpp`` (started here, one per model),
  structured, the analysis bounded by ``--analysis-chars``, decoded three ways: ``greedy`` (temperature 0, one
  proposal a round), ``sampled`` (temperature ``--temperature``, ``--samples`` proposals a round, each request
  seeded) and ``critic`` (the sampled engineer's ``--samples`` replies, the one the critic scores highest on its own
  draws applied; one proposal a round).

Per cell: kept/B − fixed (the expected kept prompts per budget against the round's own config) with its cluster-
bootstrap interval over rounds, the runs above and below fixed, the fallback share, the **restate share** (applied
proposals whose config equals the round's config; a fallback counts as one, not as a restatement), the **uniform
share** (applied proposals that move every group's difficulty the same way and no budget: one word copied), the
self-prediction Brier against saying 0.5 and against copying the evidence (``--predict N``), and the cost per
proposal: wall seconds, this process's CPU seconds and the server's (read from /proc). Each cell is written as it finishes (``OUTPUT/cells/<label>.json``; a rerun skips finished cells),
then ``OUTPUT/scale.md`` and ``OUTPUT/scale.png``. Every budget is a count (rounds, proposals, instances, samples).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from design_step import start_server  # noqa: E402  (bench/design_step.py, beside this file)
from served_replies import interface_options  # noqa: E402  (decisions-read: the decisions interface with read_first)

RULES = ("fixed", "learnability", "rlve", "inverted")
#: parameters of each model (embedding included), for the curve's x axis
PARAMETERS = {"smollm2-135m-instruct": 134.5e6, "qwen2.5-coder-0.5b-instruct": 494e6, "qwen2.5-coder-1.5b-instruct": 1.54e9}


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) the server process has used so far, from /proc (0 where unreadable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def engineer_file(folder: Path, label: str, section: dict[str, Any]) -> str:
    import yaml

    path = folder / f"{label}.yaml"
    path.write_text(yaml.safe_dump({"engineer": section}, sort_keys=False))
    return str(path)


def llm_section(model: str, url: str, interface: str, decoding: str, args: argparse.Namespace) -> dict[str, Any]:
    """The engineer of one cell: the decoding ``greedy``, ``sampled`` or ``critic``, each also as ``NAME-compact`` (the
    same under the context budget ``--compact-tokens``: docs/context.md#a-context-budget-max_prompt_tokens)."""
    decoding, compact = decoding.removesuffix("-compact"), decoding.endswith("-compact")
    served = {"name": "openai-compatible", "model": model, "base_url": url + "/v1", "structured": True, **interface_options(interface),
              "analysis_chars": args.analysis_chars, "max_tokens": args.max_tokens, "timeout": 1800.0, "max_retries": 0,
              "temperature": 0.0 if decoding == "greedy" else args.temperature, "seed": 0}
    if compact:
        served["max_prompt_tokens"] = args.compact_tokens
    if decoding == "critic":
        return {"name": "critic", "engineer": served, "proposals": args.samples, "instances": args.instances, "draws": args.draws,
                "seed": 1}
    return served


def cell_figures(result: dict[str, Any], label: str, seconds: dict[str, float]) -> dict[str, Any]:
    s = result["summary"][label]
    proposals = s["proposals"]
    out = {"label": label, "proposals": proposals, "rounds": s["rounds"], "fallback": s["fallback_rate"],
           "restate": s.get("restated"), "uniform": s.get("uniform"), "vs_fixed": s.get("vs_fixed_kept_per_budget"),
           "runs_above": s.get("runs_above_fixed"), "runs_below": s.get("runs_below_fixed"),
           "kept_per_budget": s["kept_per_budget"], "reference": result["summary"]["reference"]["kept_per_budget"],
           "per_proposal": {k: round(v / proposals, 2) for k, v in seconds.items()}}
    spent = [l["usage"] for l in result["lines"] if l["engineer"] == label and l.get("usage")]
    if spent:  # tokens a proposal: what the machine's load cannot change (the seconds above it can)
        out["tokens"] = {k: round(sum(u.get(f, 0) for u in spent) / proposals, 1)
                         for k, f in (("prompt", "prompt_tokens"), ("new", "completion_tokens"), ("cached", "cached_tokens"))}
    prediction = (result.get("self_prediction") or {}).get(label)
    if prediction:
        out["brier"] = {k: prediction.get(k) for k in ("brier", "brier_half", "brier_evidence")}
    return out


def score_cell(registry: Any, args: argparse.Namespace, label: str, engineers: list[str], proposals: int, server_pid: int | None,
               cache: Path, predict: int = 0) -> dict[str, Any]:
    from envengineer.plugins.engineer_bench.recorded import ScoreSettings
    from envengineer.plugins.engineer_bench.scoring import score_runs

    settings = ScoreSettings(proposals=proposals, instances=args.instances, draws=args.draws, seed=args.seed, predictions=predict,
                             context={"order": args.order} if args.order else None)
    wall, cpu, served = time.monotonic(), time.process_time(), server_cpu(server_pid) if server_pid else 0.0
    result = score_runs(registry, args.run, engineers, settings, cache)
    seconds = {"wall_s": time.monotonic() - wall, "cpu_s": time.process_time() - cpu,
               "server_cpu_s": (server_cpu(server_pid) - served) if server_pid else 0.0}
    labels = [Path(e).stem if e.endswith(".yaml") else e for e in engineers]
    return {"label": label, "settings": result["settings"], "runs": result["runs"], "cost": {**result["cost"], **seconds},
            "cells": [cell_figures(result, lab, seconds if len(labels) == 1 else {}) for lab in labels], "lines": result["lines"]}


def run(args: argparse.Namespace, console: Console) -> None:
    from rich.progress import Progress

    from envengineer.fileio import write_json
    from envengineer.registry import load_registry

    registry = load_registry()
    out = Path(args.output)
    (out / "cells").mkdir(parents=True, exist_ok=True)
    cache = Path(args.cache or out / "sample-cache")
    work = Path(tempfile.mkdtemp(prefix="engineer-scale-"))
    models = [m for m in args.models.split(",") if m]
    interfaces = [i for i in args.interfaces.split(",") if i]
    decodings = [d for d in args.decodings.split(",") if d]
    planned = 1 + len(models) * len(interfaces) * len(decodings)
    with Progress(console=console) as progress:
        task = progress.add_task("cells", total=planned)
        path = out / "cells" / "rules.json"
        if not path.exists():
            write_json(path, score_cell(registry, args, "rules", list(RULES), 1, None, cache))
        progress.advance(task)
        for model in models:
            todo = [(i, d) for i in interfaces for d in decodings
                    if not (out / "cells" / f"{model}--{i}--{d}.json").exists()]
            if not todo:
                progress.advance(task, len(interfaces) * len(decodings))
                continue
            server = start_server(model, args.threads, args.ctx, work / f"{model}.log")
            url = server.url
            try:
                progress.advance(task, len(interfaces) * len(decodings) - len(todo))
                for interface, decoding in todo:
                    label = f"{model}--{interface}--{decoding}"
                    progress.update(task, description=label)
                    spec = engineer_file(work, label, llm_section(model, url, interface, decoding, args))
                    proposals = args.samples if decoding.removesuffix("-compact") == "sampled" else 1
                    cell = score_cell(registry, args, label, [spec], proposals, server.proc.pid, cache, args.predict)
                    cell.update(model=model, parameters=PARAMETERS.get(model), interface=interface, decoding=decoding)
                    write_json(out / "cells" / f"{label}.json", cell)
                    progress.advance(task)
            finally:
                server.stop()
    table, text = report(out)
    console.print(table)
    console.print(text, highlight=False)


def uniform_shares(data: dict[str, Any]) -> dict[str, float | None]:
    """Per engineer of a cell file: its uniform share (statistics.uniform_share). A line scored before the scoring
    recorded ``moves`` gets them from its config and the round's, by the recorded run's task; a run that is not on
    this machine leaves that engineer's share None."""
    from envengineer.api import config_moves
    from envengineer.plugins.engineer_bench.recorded import REFERENCE
    from envengineer.plugins.engineer_bench.statistics import uniform_share

    reference = {(l["run"], l["round"]): l["config"] for l in data["lines"] if l["engineer"] == REFERENCE}
    lines: dict[str, list[dict[str, Any]]] = {}
    missing: set[str] = set()
    for line in data["lines"]:
        if line["engineer"] == REFERENCE:
            continue
        if line.get("moves") is None:
            task = _task(line["run"])
            if task is None:
                missing.add(line["engineer"])
                continue
            line = {**line, "moves": config_moves(task, reference[line["run"], line["round"]], line["config"])}
        lines.setdefault(line["engineer"], []).append(line)
    return {e: None if e in missing else uniform_share(mine) for e, mine in lines.items()}


@functools.cache
def _task(run: str) -> Any:
    """The task of a recorded run, read once per run (None when the run is not here)."""
    from envengineer.errors import InputError
    from envengineer.plugins.engineer_bench.recorded import load_recorded_run

    try:
        return load_recorded_run(_registry(), run).generator
    except (InputError, OSError):
        return None


@functools.cache
def _registry() -> Any:
    from envengineer.registry import load_registry

    return load_registry()


def _cells(out: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rules, llm = [], []
    for path in sorted((out / "cells").glob("*.json")):
        data = json.loads(path.read_text())
        uniform = uniform_shares(data) if data.get("lines") else {}
        for cell in data["cells"]:
            entry = {**cell, **{k: data.get(k) for k in ("model", "parameters", "interface", "decoding")}}
            if entry.get("uniform") is None:
                entry["uniform"] = uniform.get(cell["label"])
            (rules if data["label"] == "rules" else llm).append(entry)
    return rules, llm


def _interval(value: dict[str, Any] | None) -> str:
    if not value or value.get("mean") is None:
        return "—"
    ci = value.get("ci95")
    return f"{value['mean']:+.2f}" + (f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "")


INTERFACE_ORDER = ("config", "changes", "decisions", "decisions-read")
BIG, SMALL = "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"


def _mean(cell: dict[str, Any]) -> float | None:
    value = cell.get("vs_fixed")
    return value.get("mean") if isinstance(value, dict) else None


def _best(cells: list[dict[str, Any]], usable: bool) -> dict[str, Any] | None:
    """The cell with the highest kept/B − fixed mean (ties: the lower restate share, then the interfaces' order); with
    ``usable`` only cells whose fallback share is under 25%."""
    pool = [c for c in cells if _mean(c) is not None and (not usable or c["fallback"] < 0.25)]
    order = {name: i for i, name in enumerate(INTERFACE_ORDER)}
    return min(pool, key=lambda c: (-_mean(c), c.get("restate") or 0.0, order.get(c["interface"], len(order))), default=None)


def picks(llm: list[dict[str, Any]]) -> dict[str, Any]:
    """The rules docs/results-engineer-scale.md fixed before any run, applied to the cells finished so far:
    ``expansion`` (per model, the interface sampled and criticised next: the highest greedy kept/B − fixed, ties by the
    lower restate share, then the order config, changes, decisions, decisions-read), ``part2`` (the closed loops'
    engineer: the 1.5B's best cell, any decoding, with fallback under 25%, if its mean is above 0; else the 0.5B's the same way; else
    the 1.5B's highest all the same, said so) and ``part3`` (the 0.5B's interface for claim (c): its best greedy cell
    with fallback under 25%, ``config`` if none)."""
    models = list(dict.fromkeys(c.get("model") for c in llm))
    every = {m: [c for c in llm if c.get("model") == m] for m in models}
    greedy = {m: [c for c in cells if c.get("decoding") == "greedy"] for m, cells in every.items()}
    out: dict[str, Any] = {"expansion": {}}
    for model, cells in greedy.items():
        best = _best(cells, usable=False)
        out["expansion"][model] = best["interface"] if best else None
    part2, why = None, ""
    for model in (BIG, SMALL):  # every decoding of the model (the expansion's cells too)
        best = _best(every.get(model, []), usable=True)
        if best is not None and (_mean(best) or 0.0) > 0:
            part2, why = best, f"{model}'s best cell with fallback under 25%, above fixed"
            break
    if part2 is None:
        part2 = _best(every.get(BIG, []), usable=False)
        why = "no cell of either Qwen model above fixed: the 1.5B's highest all the same (an engineer the instrument scores at or below fixed)"
    out["part2"] = {"model": part2["model"], "interface": part2["interface"], "decoding": part2["decoding"], "vs_fixed": _mean(part2),
                    "why": why} if part2 else None
    small = _best(greedy.get(SMALL, []), usable=True)
    out["part3"] = {"interface": small["interface"] if small else "config",
                    "why": "the 0.5B's best greedy cell with fallback under 25%" if small else "no 0.5B cell with fallback under 25%: config"}
    out["screen_cells"] = {m: len(cells) for m, cells in every.items()}
    return out


def _brier(brier: dict[str, Any]) -> float | None:
    """The self-prediction Brier's mean: the scoring writes it as {mean, ci95} (a bare number in hand-made cells)."""
    value = brier.get("brier")
    return value.get("mean") if isinstance(value, dict) else value


def _figure(cell: dict[str, Any], key: str) -> float | None:
    """One plotted figure of a cell: a share, an interval's mean, the Brier's mean or wall seconds a proposal."""
    if key == "brier":
        return _brier(cell.get("brier") or {})
    if key == "wall_s":
        return (cell.get("per_proposal") or {}).get("wall_s")
    value = cell.get(key)
    return value.get("mean") if isinstance(value, dict) else value


def report(out: Path) -> tuple[Table, str]:
    """The table of every finished cell, and the registered rules' picks as text; writes scale.md, picks.json, the plot."""
    from envengineer.fileio import write_json

    rules, llm = _cells(out)
    table = Table(title=f"{out}: kept/B − fixed per engineer (the same recorded rounds), restate and fallback shares, cost a proposal",
                  title_justify="left")
    for column in ("engineer", "params", "interface", "decoding", "proposals", "kept/B − fixed [95%]", "runs + / −", "restated",
                   "uniform", "fell back", "Brier (0.5; evidence)", "tokens / proposal (prompt, cached, new)", "s / proposal (wall, server CPU)"):
        table.add_column(column)
    rows = []
    for cell in rules + llm:
        params = f"{cell['parameters'] / 1e6:.0f}M" if cell.get("parameters") else ""
        brier = cell.get("brier") or {}
        b = (f"{_brier(brier):.3f} ({brier['brier_half']:.3f}; {brier['brier_evidence']:.3f})"
             if _brier(brier) is not None and brier.get("brier_evidence") is not None else "—")
        cost = cell.get("per_proposal") or {}
        row = [cell.get("model") or cell["label"], params, cell.get("interface") or "", cell.get("decoding") or "", str(cell["proposals"]),
               _interval(cell.get("vs_fixed")) if cell["label"] != "fixed" else "0 (the reference)",
               f"{cell.get('runs_above') or 0} / {cell.get('runs_below') or 0}",
               f"{100 * cell['restate']:.0f}%" if cell.get("restate") is not None else "—",
               f"{100 * cell['uniform']:.0f}%" if cell.get("uniform") is not None else "—", f"{100 * cell['fallback']:.0f}%", b,
               "{prompt:.0f}, {cached:.0f}, {new:.0f}".format(**cell["tokens"]) if cell.get("tokens") else "—",
               f"{cost['wall_s']:.0f}, {cost['server_cpu_s']:.0f}" if cost else "—"]
        table.add_row(*row)
        rows.append(row)
    header = "| " + " | ".join(c.header for c in table.columns) + " |\n|" + "---|" * len(table.columns) + "\n"
    chosen = picks(llm) if llm else None
    lines = []
    if chosen:
        lines.append("\nThe registered rules on the cells so far (cells per model: "
                     + ", ".join(f"{m} {n}" for m, n in chosen["screen_cells"].items()) + "):\n")
        lines.append("- expansion (sampled and critic): " + ", ".join(f"{m} `{i}`" for m, i in chosen["expansion"].items()) + "\n")
        if chosen["part2"]:
            p2 = chosen["part2"]
            lines.append(f"- part 2's engineer: {p2['model']} `{p2['interface']}` {p2['decoding']} ({_interval({'mean': p2['vs_fixed']})}; "
                         f"{p2['why']})\n")
        lines.append(f"- part 3's interface for the 0.5B: `{chosen['part3']['interface']}` ({chosen['part3']['why']})\n")
    (out / "scale.md").write_text(header + "".join("| " + " | ".join(r) + " |\n" for r in rows) + "".join(lines))
    if chosen:
        write_json(out / "picks.json", chosen)
    if llm:
        plot(rules, llm, out / "scale.png")
    return table, "".join(lines)


def plot(rules: list[dict[str, Any]], llm: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = (("vs_fixed", "kept/B − fixed"), ("restate", "restated share"), ("uniform", "uniform share (one word copied)"),
               ("fallback", "fallback share"),
               ("brier", "self-prediction Brier (dotted: 0.5 everywhere)"), ("wall_s", "seconds a proposal (wall)"))
    fig, axes = plt.subplots(1, len(figures), figsize=(28, 4.2))
    for axis, (key, title) in zip(axes, figures):
        axis.set_xscale("log")  # before the rules' labels are placed at the axis's left end
        for series in sorted({(c["interface"], c["decoding"]) for c in llm}):
            points = sorted((c["parameters"], _figure(c, key)) for c in llm
                            if (c["interface"], c["decoding"]) == series and c.get("parameters") and _figure(c, key) is not None)
            if points:
                axis.plot([p for p, _ in points], [v for _, v in points], marker="o", label=f"{series[0]}, {series[1]}")
        if key == "vs_fixed":
            for rule in rules:
                if rule["label"] != "fixed" and rule.get("vs_fixed"):
                    axis.axhline(rule["vs_fixed"]["mean"], linestyle=":", color="grey")
                    axis.annotate(rule["label"], (axis.get_xlim()[0], rule["vs_fixed"]["mean"]), fontsize=7, color="grey",
                                  xytext=(2, 2), textcoords="offset points")
            axis.axhline(0.0, color="black", linewidth=0.8)
        if key == "brier":
            for half in sorted({c["brier"]["brier_half"] for c in llm if (c.get("brier") or {}).get("brier_half") is not None}):
                axis.axhline(half, linestyle=":", color="grey", linewidth=0.6)
        axis.set_xscale("log")
        axis.set_xlabel("parameters")
        axis.set_title(title)
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", default=[], help="a recorded run (the same for every engineer); repeat")
    parser.add_argument("--models", default="smollm2-135m-instruct,qwen2.5-coder-0.5b-instruct,qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--interfaces", default="config,changes,decisions",
                        help="config, changes, decisions and/or decisions-read (decisions with read_first)")
    parser.add_argument("--decodings", default="greedy,sampled,critic",
                        help="greedy, sampled (--samples proposals) and/or critic; each also as NAME-compact, under --compact-tokens")
    parser.add_argument("--compact-tokens", type=int, default=2048,
                        help="the compact context's budget (the engineer's max_prompt_tokens, counted as characters / 4)")
    parser.add_argument("--samples", type=int, default=2, help="K: proposals a round when sampled; replies the critic chooses among")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--instances", type=int, default=32, help="instances drawn per scored config")
    parser.add_argument("--draws", type=int, default=4, help="answers per instance")
    parser.add_argument("--predict", type=int, default=0, help="self-predictions asked per round of each LLM cell (Brier)")
    parser.add_argument("--analysis-chars", type=int, default=400)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--order", default="stable-first",
                        help="the context's order for every engineer's request (stable-first: what rounds share first, for the "
                             "server's prompt cache); empty: each run's own")
    parser.add_argument("--threads", type=int, default=2, help="llama-server's threads")
    parser.add_argument("--ctx", type=int, default=8192, help="llama-server's context")
    parser.add_argument("--seed", type=int, default=0, help="the benchmark's draws")
    parser.add_argument("--cache", default=None, help="the sample cache (default OUTPUT/sample-cache)")
    parser.add_argument("--output", default="bench/results/engineer-scale")
    parser.add_argument("--report", default=None, help="print the table of a finished OUTPUT and write its markdown and plot")
    args = parser.parse_args()
    console = Console(width=None if sys.stdout.isatty() else 200)
    if args.report:
        table, text = report(Path(args.report))
        console.print(table)
        console.print(text, highlight=False)
        return
    if not args.run:
        parser.error("give at least one --run")
    run(args, console)


if __name__ == "__main__":
    main()
