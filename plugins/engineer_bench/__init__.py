"""The engineer benchmark as a built-in plugin: ``envengineer engineers score`` scores engineers' proposals
for recorded rounds without training (docs/engineer-score.md), and the run report's "Engineer benchmark" sections
(the ``report_sections`` hook) read the slices it leaves in a run; the ``critic`` engineer (:mod:`.critic`) chooses among
another engineer's proposals by the same measure before a round trains.

The instrument: :mod:`.scoring` (the sample cache, a round's scorer, :func:`~.scoring.score_runs`), :mod:`.recorded`
(what it reads of a recorded run), :mod:`.statistics` (the figures, the summary, the predictive check),
:mod:`.predictions` (self-prediction, ``--predict``) and :mod:`.output` (the files written, the report's section)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape

from envengineer.api import CommandState
from envengineer.hookspecs import hookimpl


def _interval(cell: Any, digits: int = 1, sign: bool = False) -> str:
    """``mean`` over its 95% interval on a second line (a narrow column)."""
    if not isinstance(cell, dict) or cell.get("mean") is None:
        return ""
    ci = cell.get("ci95")
    form = f"{'+' if sign else ''}.{digits}f"
    return f"{cell['mean']:{form}}" + (f"\n[dim]{ci[0]:{form}}…{ci[1]:{form}}[/]" if ci else "")


def engineers_score(
    state: CommandState,
    runs: list[Path] = typer.Argument(..., help="recorded run directories: every round with a checkpoint and evidence is scored"),
    engineer: Optional[list[str]] = typer.Option(None, "--engineer", help="engineer name, or a YAML file with its options (repeatable); "
                                                 "the fixed config is always scored as the reference"),
    samples: int = typer.Option(4, "--samples", min=1, help="K: proposals asked of each engineer per round (the first is the loop's own request)"),
    instances: int = typer.Option(64, "--instances", min=1, help="M: fresh training instances drawn from each proposed config"),
    draws: int = typer.Option(8, "--draws", min=1, help="S: answers the round's checkpoint samples per instance, at the trainer's temperature"),
    seed: int = typer.Option(0, "--seed", help="seed of the instance draws and the sampling (with the run's seed and the round)"),
    output: Optional[Path] = typer.Option(None, "--output", help="folder for score.json, proposals.jsonl and score.png (default: ./engineer-score)"),
    cache: Optional[Path] = typer.Option(None, "--cache", help="sample cache folder (default: OUTPUT/cache when --output is given, "
                                         "else $ENVENGINEER_CACHE/engineer-score)"),
    show_proposals: bool = typer.Option(False, "--proposals", help="also print one row per scored proposal"),
    recorded: bool = typer.Option(False, "--recorded", help="also score the config each run trained on next, and correlate its score "
                                  "with the gain that round then measured (validation, sampled pass@1, benchmarks)"),
    predict: int = typer.Option(0, "--predict", min=0, help="also ask each engineer with a model this many times per round to predict the "
                                "checkpoint's sampled success per group, scored by Brier against what the reference then measured"),
    context: Optional[list[str]] = typer.Option(None, "--context", help="KEY=VALUE laid over each run's context section for the "
                                                "engineers' requests (repeatable), e.g. order=stable-first or preset=V4"),
) -> None:
    """Score engineers' proposals for each recorded round's checkpoint, without training (docs/engineer-score.md)."""
    from envengineer.plugins.engineer_bench.output import write_results
    from envengineer.plugins.engineer_bench.recorded import ScoreSettings
    from envengineer.plugins.engineer_bench.scoring import score_runs
    from envengineer.fileio import cache_root
    from envengineer.loop.runconfig import apply_overrides

    console, err_console = state.console, state.err_console
    cache_dir = cache if cache is not None else (output / "cache" if output is not None else cache_root() / "engineer-score")
    output = output if output is not None else Path("engineer-score")
    # KEY=VALUE read as a run config's overrides are (values as YAML; dotted keys go into the section)
    settings = ScoreSettings(proposals=samples, instances=instances, draws=draws, seed=seed, predictions=predict,
                             context=apply_overrides({}, context) if context else None)
    with err_console.status("scoring") as status:
        result = score_runs(state.registry, runs, engineer or [], settings, cache_dir, recorded=recorded,
                            progress=lambda text: status.update(escape(text)))
    written = write_results(result, output)
    print_result(console, result, show_proposals=show_proposals)
    console.print(f"cost: {result['cost']['samples_drawn']} samples drawn for {result['cost']['instances_sampled']} instances, "
                  f"{result['cost']['instances_from_cache']} instances from the cache ({escape(str(cache_dir))}); "
                  f"{result['cost']['cpu_s']:.1f} CPU s, {result['cost']['wall_s']:.1f} s wall", highlight=False)
    console.print(f"wrote {', '.join(escape(str(p)) for p in written)}", highlight=False, soft_wrap=True)


def print_result(console: Any, result: dict[str, Any], *, show_proposals: bool = False) -> None:
    """The benchmark's tables for a scoring's result (what ``score_runs`` returns, or ``score.json`` with its
    ``proposals.jsonl`` read back as ``lines``): per engineer, budget shares, per run, proposals, the predictive
    check and self-knowledge, then the legend."""
    from rich.table import Table

    from envengineer.plugins.engineer_bench.recorded import REFERENCE

    summary, settings = result["summary"], result["settings"]
    rounds = sum(len(r["rounds"]) for r in result["runs"])
    groups_g = ",".join(str(g) for g in dict.fromkeys(r["group_size"] for r in result["runs"]))
    table = Table(title=f"engineer benchmark: {len(result['runs'])} run(s), {rounds} rounds; K={settings['proposals']} proposals, "
                        f"M={settings['instances']} instances, S={settings['draws']} draws, G={groups_g}",
                  title_justify="left")
    for column in ("engineer", "n", "fb", "kept/B", "−fixed", "same", "unif", "▲/▼", "Σp(1−p)", "R/W"):
        table.add_column(column, justify="left" if column == "engineer" else "right", no_wrap=True)
    for name in result["engineers"]:
        entry = summary.get(name)
        if not entry:
            continue
        table.add_row(
            escape(name), str(entry["proposals"]), f"{100 * entry['fallback_rate']:.0f}%",
            _interval(entry["kept_per_budget"]), _interval(entry.get("vs_fixed_kept_per_budget"), sign=True),
            "" if entry.get("restated") is None else f"{100 * entry['restated']:.0f}%",
            "" if entry.get("uniform") is None else f"{100 * entry['uniform']:.0f}%",
            "" if name == REFERENCE else f"{entry['runs_above_fixed']}/{entry['runs_below_fixed']}",
            f"{entry['learnability']['mean']:.3f}", f"{100 * entry['all_right']['mean']:.0f}%/{100 * entry['all_wrong']['mean']:.0f}%",
        )
    console.print(table)
    groups = list(dict.fromkeys(g for entry in summary.values() for g in entry["budget_share"]))
    shares = Table(title="share of the budget per group (mean over proposals)", title_justify="left")
    shares.add_column("engineer")
    for g in groups:
        shares.add_column(g, justify="right")
    for name in result["engineers"]:
        if name in summary:
            shares.add_row(name, *(f"{100 * summary[name]['budget_share'].get(g, 0.0):.0f}%" for g in groups))
    console.print(shares)
    others = [name for name in result["engineers"] if name != REFERENCE and name in summary]
    if len(result["runs"]) > 1 and others:
        per_run = Table(title="per run: the reference's kept/B, each engineer's mean −fixed", title_justify="left")
        for column in ("run", "seed", "reference", *others):
            per_run.add_column(escape(column), justify="left" if column == "run" else "right")
        for run in result["runs"]:
            mine = [l for l in result["lines"] if l["run"] == run["path"] and l["engineer"] == REFERENCE]
            cells = [summary[name]["per_run_vs_fixed_kept"].get(run["path"]) for name in others]
            per_run.add_row(escape(Path(run["path"]).name), str(run["seed"]), f"{sum(l['kept_per_budget'] for l in mine) / len(mine):.1f}",
                            *("" if c is None else f"{c:+.1f}" for c in cells))
        console.print(per_run)
    if show_proposals:
        rows = Table(title="proposals", title_justify="left")
        for column in ("run", "round", "engineer", "#", "fallback", "kept / budget", "− fixed", "Σp(1−p)/inst"):
            rows.add_column(column)
        for line in result["lines"]:
            versus = line.get("vs_fixed", {}).get("kept_per_budget")
            rows.add_row(Path(line["run"]).name, str(line["round"]), line["engineer"], str(line["proposal"]),
                         "yes" if line["fallback"] else "", f"{line['kept_per_budget']:.1f}", "" if versus is None else f"{versus:+.1f}",
                         f"{line['learnability']:.3f}")
        console.print(rows)
    if result.get("predictive"):
        check = Table(title="does the score predict the next round's gain? (the config each run trained on next; Spearman, across runs and rounds)",
                      title_justify="left")
        for column in ("score", "gain", "n", "rho", "p"):
            check.add_column(column, justify="left" if column in ("score", "gain") else "right")
        for key, cell in result["predictive"].items():
            score_name, _, measure = key.partition(" ~ ")
            check.add_row(score_name, measure, str(cell["n"]), "" if cell["rho"] is None else f"{cell['rho']:+.2f}",
                          "" if cell["p"] is None else ("<1e-15" if cell["p"] < 1e-15 else f"{cell['p']:.2g}"))
        console.print(check)
        calibration = result["predictive"].get("kept_per_budget ~ mixed prompts the trainer found next")
        if calibration:
            console.print(f"kept/B of the config trained next: {calibration['mean_predicted']:.1f} predicted, {calibration['mean_measured']:.1f} "
                          f"mixed prompts the trainer then found (mean over {calibration['n']} rounds; mean absolute error "
                          f"{calibration['mean_abs_error']:.1f})", highlight=False)
    if result.get("self_prediction"):
        known = Table(title="self-knowledge: each engineer's prediction of the checkpoint's sampled success per group, Brier against what the "
                            "reference measured (lower is better; beside it two predictions without self-knowledge)", title_justify="left")
        for column in ("engineer", "asked", "usable", "distinct", "Brier", "0.5 everywhere", "copy of the evidence"):
            known.add_column(column, justify="left" if column == "engineer" else "right")
        for name, entry in result["self_prediction"].items():
            b = entry["brier"]
            known.add_row(escape(name), str(entry["asked"]), str(entry["usable"]), str(entry["distinct"]),
                          "—" if b["mean"] is None else (f"{b['mean']:.3f}" + (f" [{b['ci95'][0]:.3f}, {b['ci95'][1]:.3f}]" if b["ci95"] else "")),
                          f"{entry['brier_half']:.3f}", "—" if entry["brier_evidence"] is None else f"{entry['brier_evidence']:.3f}")
        console.print(known)
    console.print(f"[dim]reference: the round's config unchanged (the fixed environment); n: proposals scored (rounds × K); fb: fallback rate; kept/B: expected kept (mixed) prompts per budget, the "
                  f"run's budget × the chance that G answers (the trainer's prefilter samples, else its GRPO group) are some right and some wrong; −fixed: minus the "
                  f"reference of the same round; same: applied proposals whose config is the round's own (restated); unif: applied proposals that move every group's difficulty the same way and no budget (one word copied); ▲/▼: runs (seeds) whose mean −fixed is above/below 0; Σp(1−p): per instance; R/W: shares "
                  f"of all-right and all-wrong prompts; second lines: 95% bootstrap interval over rounds[/]", highlight=False)


def engineers_report(
    state: CommandState,
    output: Path = typer.Argument(..., help="a finished scoring's folder (its score.json and proposals.jsonl)"),
    show_proposals: bool = typer.Option(False, "--proposals", help="also print one row per scored proposal"),
) -> None:
    """Print a finished scoring's tables again from its files, without scoring (an archived score.json and
    proposals.jsonl are enough)."""
    from envengineer.plugins.engineer_bench.output import read_results

    print_result(state.console, read_results(output), show_proposals=show_proposals)


@hookimpl
def register_commands(cli: Any, state: CommandState) -> None:
    engineers = typer.Typer(help="Engineers measured without training: the engineer benchmark (docs/engineer-score.md).", no_args_is_help=True)
    engineers.command("score")(state.command(engineers_score))
    engineers.command("report")(state.command(engineers_report))
    cli.add_typer(engineers, name="engineers")


@hookimpl(tryfirst=True)  # before the tasks' sections, where the report has always shown them
def report_sections(run: Any) -> list[tuple[str, str]]:
    """One section per scoring recorded in the run (``<run>/engineer-score/``): blocking this plugin leaves them out."""
    from envengineer.plugins.engineer_bench.output import report_sections as scored_sections

    return scored_sections(run.path)


@hookimpl
def register_engineers(register: Any) -> None:
    """The ``critic`` engineer (:mod:`.critic`): another engineer's K proposals, the one this instrument scores highest applied."""
    from envengineer.plugins.engineer_bench.critic import ENGINEERS

    for engineer in ENGINEERS:
        register(engineer)
