"""The pre-registered tests of docs/results-llm-engineer.md and of docs/results-engineer-scale.md's part 2,
computed from a suite's run directories.

    python bench/llm_engineer_claims.py runs/llm-engineer/sim --primary bench:mapf-2agents-test
    python bench/llm_engineer_claims.py runs/llm-engineer/gw --primary eval --secondary bench:grid-walk-target
    # part 2 (the 1.5B): arms llm-v6, llm-v6-donor, llm-no-f; the seed-level test primary; learnability the control
    python bench/llm_engineer_claims.py runs/llm-engineer-qwen/sim --primary bench:mapf-2agents-test --llm llm --test seeds \
        --rule-arms learnability rlve window fixed-band --control learnability

For every arm (a folder of seed-N runs under the suite's output) and seed: the primary outcome after the
last round (``eval``: the validation set's greedy valid rate; ``bench:NAME``: that benchmark's), the design
steps applied and fallen back, and the prompts trained on per round. Then the two families of the
pre-registration, each comparison the paired sign test over instances seed by seed against the same seed,
pooled over the seeds, Holm-adjusted within its family, and the rule "A beats B": higher at every seed and
adjusted p < 0.05 (``--test seeds``: the per-seed differences' exact sign-flip test decides, "A beats B" when
the mean difference is positive and the adjusted p < 0.05). Family (a): LLM-v6 against fixed and against the
strongest rule-based arm (the highest mean primary outcome among the arms given by --rule-arms); family (b):
LLM-v6 against LLM-v6-donor and against LLM-no-f (LLM: --llm, smollm2 by default); the control family: each
--control arm against fixed. Then the reading rules: the control detects (every control arm beats fixed), claim
(a) supported (LLM-v6 beats fixed and the strongest), claim (b) supported, not supported or not testable (LLM-v6
beats neither fixed nor the strongest). Writes claims.json beside the runs (atomically).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.table import Table

from envengineer.plugins.suite.arms.stats import holm, seed_test
from envengineer.fileio import read_jsonl, write_text
from envengineer.store.rundir import RunDir, Step
from envengineer.plugins.suite.arms.paired import paired, pooled

FIXED = "fixed"


def llm_arms(prefix: str) -> tuple[str, str, str]:
    """The LLM arms of a claims suite named by ``prefix``: V6, V6 with a donor's F, and no F."""
    return f"{prefix}-v6", f"{prefix}-v6-donor", f"{prefix}-no-f"


def reading(rows: list[dict[str, Any]], prefix: str, strongest: str | None) -> dict[str, Any]:
    """The pre-registrations' reading rules over the families' rows: ``control_detects`` (every control row beats
    fixed; None without one), claim (a) ``supported`` when LLM-v6 beats fixed and the strongest rule arm (``beats
    fixed only`` when it beats fixed alone), claim (b) ``supported`` when LLM-v6 beats its donor ablation, ``not
    testable`` when LLM-v6 beats neither fixed nor the strongest (the engineer does not help, so what it reads cannot
    be shown to matter), else ``not supported``. Nothing is read from the LLM arms when the control does not detect."""
    def beats(family: str, a: str, b: str | None) -> bool | None:
        row = next((r for r in rows if r["family"] == family and r["a"] == a and r["b"] == b), None)
        return None if row is None else bool(row["beats"])

    llm, donor, _ = llm_arms(prefix)
    controls = [bool(r["beats"]) for r in rows if r["family"] == "control"]
    detects = all(controls) if controls else None
    over_fixed, over_strongest = beats("a", llm, FIXED), beats("a", llm, strongest)
    a = ("supported" if over_fixed and over_strongest else "beats fixed only" if over_fixed else
         "beats the strongest only" if over_strongest else "not supported")
    b = "not testable" if not over_fixed and not over_strongest else ("supported" if beats("b", llm, donor) else "not supported")
    return {"control_detects": detects, "read": detects is not False, "claim_a": a, "claim_b": b}


def verdicts(run: Path, where: str) -> dict[str, dict[str, bool]]:
    """Instance id -> {"valid": ...} after the run's last round, for ``eval`` or ``bench:NAME`` (the mapping
    :func:`envengineer.plugins.suite.arms.paired.paired` reads)."""
    rounds = sorted(p for p in run.glob("round-*") if p.is_dir())
    if not rounds:
        raise SystemExit(f"{run}: no rounds")
    last = rounds[-1]
    path = last / "eval" / "verdicts.jsonl" if where == "eval" else last / "bench" / where.split(":", 1)[1] / "verdicts.jsonl"
    if not path.exists():
        raise SystemExit(f"{path}: missing (is {run} finished, and was {where} evaluated after its last round?)")
    return {r["id"]: {"valid": bool(r["valid"])} for r in read_jsonl(path)}


def rate(verdicts_: dict[str, dict[str, bool]]) -> float:
    return sum(v["valid"] for v in verdicts_.values()) / len(verdicts_)


def design_steps(run: Path) -> tuple[int, int]:
    """(design steps, of which fell back), from the run's history."""
    fell_back = [bool(line.get("fallback")) for line in RunDir(run).history() if line.get("step") == Step.DESIGN]
    return len(fell_back), sum(fell_back)


def trained_prompts(run: Path) -> list[int]:
    return [int(line.get("trained_prompts") or line.get("prompts_used") or 0) for line in RunDir(run).history()
            if line.get("step") == Step.TRAIN]


def arm_runs(output: Path) -> dict[str, dict[int, Path]]:
    arms: dict[str, dict[int, Path]] = {}
    for arm in sorted(p for p in output.iterdir() if p.is_dir()):
        seeds = {int(s.name.split("-", 1)[1]): s for s in arm.glob("seed-*") if s.is_dir() and (s / "history.jsonl").exists()}
        if seeds:
            arms[arm.name] = dict(sorted(seeds.items()))
    return arms


#: the figures of a finished run an archive keeps: its config, history, each round's config, evaluation summaries and
#: training signal, not its checkpoints or training records
FIGURES = ("run.yaml", "history.jsonl", "round-*/config.yaml", "round-*/eval/summary.json", "round-*/bench/*/summary.json",
           "round-*/train/signal.json")
#: what --export keeps: the figures and each round's engineer folder (prompt, reply, proposal, projection, calls)
KEPT = FIGURES + ("round-*/engineer/*",)
#: and of its last round, the verdicts and answers the tests read
LAST_ROUND_KEPT = ("eval/verdicts.jsonl", "bench/*/verdicts.jsonl", "bench/*/responses.jsonl")


def export_run(run: Path, target: Path, kept: tuple[str, ...] = KEPT, last_round_kept: tuple[str, ...] = LAST_ROUND_KEPT) -> bool:
    """Copy the files of one run that ``kept`` names (globs under the run) and ``last_round_kept`` names under its
    last round into ``target``, if the run finished (every round through round_end); True when it was copied."""
    import shutil

    from envengineer.fileio import read_yaml

    rounds = int(read_yaml(run / "run.yaml")["rounds"])
    if not RunDir(run).done(Step.ROUND_END, rounds - 1):
        return False
    for pattern in kept + tuple(f"round-{rounds - 1:02d}/{p}" for p in last_round_kept):
        for path in run.glob(pattern):
            if path.is_file():
                (target / path.relative_to(run)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target / path.relative_to(run))
    return True


def export_runs(output: Path, folder: Path, kept: tuple[str, ...] = KEPT, last_round_kept: tuple[str, ...] = LAST_ROUND_KEPT,
                extra: Callable[[Path, Path], None] | None = None) -> int:
    """:func:`export_run` for each run of the suite ``output`` into ``folder``/<arm>/seed-N; ``extra(run, target)``
    adds what a caller derives from what is left out. A suite's results kept in the repository, small enough to
    commit (``tar -cJf``), from which this script and bench/frontier_steps.py remake every table. Returns the runs
    exported."""
    count = 0
    for arm, seeds in arm_runs(output).items():
        for seed, run in seeds.items():
            target = folder / arm / f"seed-{seed}"
            if export_run(run, target, kept, last_round_kept):
                if extra is not None:
                    extra(run, target)
                count += 1
    return count


def compare(a: dict[int, dict[str, dict[str, bool]]], b: dict[int, dict[str, dict[str, bool]]]) -> dict[str, Any]:
    """A against B seed by seed on the instances both answered (the suite's paired test): per-seed rate
    differences, and the gained/lost instances pooled over the seeds with their sign test."""
    seeds = sorted(set(a) & set(b))
    pairs = {s: paired(a[s], b[s], "valid") for s in seeds}
    per_seed = [{"seed": s, "diff": (p.gained - p.lost) / max(1, p.n), "gained": p.gained, "lost": p.lost}
                for s, p in pairs.items() if p is not None]
    total = pooled(list(pairs.values()))
    gained, lost = (total.gained, total.lost) if total else (0, 0)
    return {"seeds": seeds, "per_seed": per_seed, "gained": gained, "lost": lost, "p": total.p if total else 1.0}


def family(name: str, pairs: list[tuple[str, str]], outcomes: dict[str, dict[int, dict[str, bool]]],
           primary: str = "instances") -> list[dict[str, Any]]:
    """Each pair A vs B tested two ways, Holm-adjusted within the family by the ``primary`` one:

    - ``instances`` (the first pre-registrations' rule): the paired sign test over instances pooled over the
      seeds; "A beats B" when A is higher at every seed and the adjusted p < 0.05;
    - ``seeds`` (the unit of replication, issue 43): the per-seed differences' exact sign-flip permutation test
      (:func:`envengineer.plugins.suite.arms.stats.seed_test`); "A beats B" when the mean difference is positive
      and the adjusted p < 0.05.

    Both p values are in every row (``p``, ``p_holm``: the walk-level test; ``p_seeds``, ``p_seeds_holm``: the
    seed-level one), with the mean difference and its t interval over seeds."""
    if primary not in ("instances", "seeds"):
        raise ValueError(f"primary: 'instances' or 'seeds', not {primary!r}")
    rows = [{"family": name, "a": a, "b": b, **compare(outcomes[a], outcomes[b])} for a, b in pairs if a in outcomes and b in outcomes]
    for row in rows:
        test = seed_test([s["diff"] for s in row["per_seed"]])
        row["mean_diff"] = test.mean if test else None
        row["p_seeds"] = test.p if test else None
        if test and test.low is not None:
            row["interval"] = [test.low, test.high]
    for key in ("p", "p_seeds"):
        for row, adjusted in zip(rows, holm([r[key] for r in rows])):
            row[f"{key}_holm"] = adjusted
    for row in rows:
        every = bool(row["per_seed"]) and all(s["diff"] > 0 for s in row["per_seed"])
        if primary == "instances":
            row["beats"] = every and row["p_holm"] is not None and row["p_holm"] < 0.05
        else:
            row["beats"] = (row["mean_diff"] or 0) > 0 and row["p_seeds_holm"] is not None and row["p_seeds_holm"] < 0.05
        row["primary"] = primary
    return rows


def markdown(table: Table) -> str:
    """A rich table as a markdown table under its title in bold (for a docs page; the cells' markup dropped)."""
    from rich.text import Text

    def cell(value: Any) -> str:
        text = value.plain if isinstance(value, Text) else Text.from_markup(str(value)).plain
        return text.replace("|", "\\|").replace("\n", " ")

    columns = table.columns
    lines = [f"**{cell(table.title)}**", ""] if table.title else []
    lines += ["| " + " | ".join(cell(c.header) for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in zip(*(list(c.cells) for c in columns))]
    return "\n".join(lines) + "\n"


def _p(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def tests_table(rows: list[dict[str, Any]], title: str, family_column: str = "family") -> Table:
    """The rows of :func:`family` as a table: per-seed differences, mean and t interval over seeds, the seed-level
    sign-flip p and its Holm adjustment, the pooled walk counts with their sign test's p and Holm's, and the
    verdict by the rows' primary test (the primary's columns come first)."""
    tests = Table(title=title, title_justify="left")
    seeds_first = bool(rows) and rows[0].get("primary") == "seeds"
    seed_cols = ("p seeds", "p seeds (Holm)")
    walk_cols = ("+ / − walks", "p walks", "p walks (Holm)")
    for column in (family_column, "A vs B", "per seed diff (points)", "mean [95% t]",
                   *((seed_cols + walk_cols) if seeds_first else (walk_cols + seed_cols)), "A beats B"):
        tests.add_column(column)
    for r in rows:
        interval = f" [{100 * r['interval'][0]:+.1f}, {100 * r['interval'][1]:+.1f}]" if "interval" in r else ""
        seed_vals = (_p(r.get("p_seeds")), _p(r.get("p_seeds_holm")))
        walk_vals = (f"+{r['gained']} −{r['lost']}", _p(r["p"]), _p(r["p_holm"]))
        tests.add_row(r["family"], f"{r['a']} vs {r['b']}", " ".join(f"{100 * s['diff']:+.1f}" for s in r["per_seed"]),
                      (f"{100 * r['mean_diff']:+.1f}" if r["mean_diff"] is not None else "—") + interval,
                      *((seed_vals + walk_vals) if seeds_first else (walk_vals + seed_vals)), "yes" if r["beats"] else "no")
    return tests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path, help="the suite's output folder (ARM/seed-N runs)")
    parser.add_argument("--primary", default="eval", help="eval (validation) or bench:NAME")
    parser.add_argument("--secondary", default=None, help="another outcome reported the same way, not tested")
    parser.add_argument("--rule-arms", nargs="+", default=["learnability", "heuristic"], help="the rule-based arms")
    parser.add_argument("--llm", default="smollm2", help="the LLM arms' prefix: PREFIX-v6, PREFIX-v6-donor, PREFIX-no-f")
    parser.add_argument("--test", choices=["instances", "seeds"], default="instances",
                        help="the test that decides 'A beats B': instances (pooled sign test, higher at every seed) or seeds "
                             "(the per-seed differences' exact sign-flip test)")
    parser.add_argument("--control", nargs="+", default=None, help="the control family's arms, each against fixed "
                        "(default: every rule arm present)")
    parser.add_argument("--export", type=Path, default=None, help="also copy the finished runs' figures and engineer folders (no "
                        "checkpoints, no training records) into EXPORT/<suite folder name>/, for an archive the tables are remade from")
    args = parser.parse_args()
    console = Console(width=None if sys.stdout.isatty() else 150)
    runs = arm_runs(args.output)
    if not runs:
        raise SystemExit(f"{args.output}: no finished runs (ARM/seed-N with history.jsonl)")
    result: dict[str, Any] = {"output": str(args.output), "primary": args.primary, "secondary": args.secondary, "arms": {}}
    outcomes: dict[str, dict[int, dict[str, bool]]] = {}
    table = Table(title=f"{args.output}: {args.primary} after the last round", title_justify="left")
    for column in ("arm", "per seed (valid %)", "mean", "design steps (fell back)", "prompts trained / round",
                   *([f"{args.secondary} per seed"] if args.secondary else [])):
        table.add_column(column)
    for arm, seeds in runs.items():
        outcomes[arm] = {s: verdicts(run, args.primary) for s, run in seeds.items()}
        rates = {s: rate(v) for s, v in outcomes[arm].items()}
        design = [design_steps(run) for run in seeds.values()]
        prompts = [p for run in seeds.values() for p in trained_prompts(run)]
        entry = {"seeds": list(seeds), "rates": rates, "mean": statistics.fmean(rates.values()),
                 "design_steps": sum(d[0] for d in design), "fallbacks": sum(d[1] for d in design),
                 "trained_prompts_mean": statistics.fmean(prompts) if prompts else None}
        if args.secondary:
            entry["secondary"] = {s: rate(verdicts(run, args.secondary)) for s, run in seeds.items()}
        result["arms"][arm] = entry
        table.add_row(arm, " ".join(f"{100 * r:.1f}" for r in rates.values()), f"{100 * entry['mean']:.1f}",
                      f"{entry['design_steps']} ({entry['fallbacks']})",
                      f"{entry['trained_prompts_mean']:.1f}" if prompts else "—",
                      *([" ".join(f"{100 * r:.1f}" for r in entry["secondary"].values())] if args.secondary else []))
    console.print(table)
    rule = [a for a in args.rule_arms if a in result["arms"]]
    strongest = max(rule, key=lambda a: result["arms"][a]["mean"]) if rule else None
    llm, donor, no_f = llm_arms(args.llm)
    controls = [a for a in (args.control if args.control is not None else rule) if a in result["arms"]]
    rows = family("a", [(llm, FIXED)] + ([(llm, strongest)] if strongest else []), outcomes, primary=args.test)
    rows += family("b", [(llm, donor), (llm, no_f)], outcomes, primary=args.test)
    rows += family("control", [(a, FIXED) for a in controls], outcomes, primary=args.test)
    result["strongest_rule_arm"], result["tests"], result["test"] = strongest, rows, args.test
    result["reading"] = reading(rows, args.llm, strongest)
    title = ("pre-registered tests: the sign-flip test over seeds (primary) and the pooled sign test over instances, Holm within "
             "the family" if args.test == "seeds" else
             "pre-registered tests: paired sign test over instances, pooled over seeds, Holm within the family")
    console.print(tests_table(rows, title))
    r = result["reading"]
    console.print(f"the control detects: {'—' if r['control_detects'] is None else 'yes' if r['control_detects'] else 'no'}"
                  + ("" if r["read"] else " (nothing is read from the LLM arms)")
                  + f"; claim (a): {r['claim_a']}; claim (b): {r['claim_b']} (strongest rule arm: {strongest})")
    write_text(args.output / "claims.json", json.dumps(result, indent=2, default=str) + "\n")
    console.print(f"wrote {args.output / 'claims.json'}")
    if args.export:
        n = export_runs(args.output, args.export / args.output.name)
        console.print(f"exported {n} finished runs of {args.output} to {args.export / args.output.name}")


if __name__ == "__main__":
    main()
