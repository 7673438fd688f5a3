"""The pre-registered tests of docs/results-frontier.md's equal-steps comparison, from the suites' run directories.

    python bench/frontier_steps.py runs/frontier-steps/steps --secondary runs/frontier-steps/instances \\
        --plots docs/results-frontier

For every arm (a folder of seed-N runs) and seed of each suite: after the last round, the greedy valid rate
on the two targets (``grid-walk-target``: unseen walks of the trained lengths k9 and k10;
``grid-walk-beyond``: k11 and k12, lengths no run can train on), the validation rate, the prompts trained on
(kept prompts: whole optimizer steps) and the CPU seconds of the run. Then, per target, the family of the
pre-registration: ``learnability`` against ``fixed`` and against the strongest baseline (the highest mean on
that target among --baselines), ``learnability-shares`` against ``fixed``; each the paired sign test over
instances seed by seed, pooled over the seeds, Holm-adjusted within the family, and the rule "A beats B":
higher at every seed and adjusted p < 0.05 (the same tests as bench/llm_engineer_claims.py).

It also checks, from the run directories, that no run trained on the never-trained target's lengths: every
training record of every round (``train.jsonl`` and, with a prefilter, ``train/drawn.jsonl``) is read, and a
record in a group of the never-trained set is counted (the check passes at 0). With ``--plots DIR``: the
target after each round against the cumulative kept prompts and against the cumulative CPU seconds, one line
per arm (mean over seeds). Writes steps.json beside each suite's runs (atomically).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
from llm_engineer_claims import FIGURES, LAST_ROUND_KEPT, arm_runs, export_runs, family, markdown, rate, tests_table, verdicts  # noqa: E402

from envengineer.fileio import read_jsonl, write_text  # noqa: E402
from envengineer.store.rundir import RunDir, Step  # noqa: E402

TARGET, BEYOND, VALIDATION = "bench:grid-walk-target", "bench:grid-walk-beyond", "eval"
CHECKED = "never-trained-check.json"  # an exported run's never-trained counts, made from its training records
ENGINEER, SHARES, FIXED = "learnability", "learnability-shares", "fixed"
STRONGEST = "strongest"  # in --tests: the strongest baseline on that target
#: the first pre-registration's family (docs/results-frontier.md): learnability against fixed and the strongest baseline,
#: the shares-only ablation against fixed
DEFAULT_TESTS = [(ENGINEER, FIXED), (ENGINEER, STRONGEST), (SHARES, FIXED)]
#: the fields of a grid-walk record its parts are read by: the grid size and the walk length
PARTS = (("size", "grid size"), ("k", "walk length"))


def per_round(run: Path) -> list[dict[str, Any]]:
    """Each finished round: the kept prompts trained on, the CPU seconds of its steps, and each target's rate."""
    rounds: dict[int, dict[str, Any]] = {}
    for line in RunDir(run).history():
        r = line.get("round")
        if r is None:
            continue
        entry = rounds.setdefault(int(r), {"round": int(r), "kept": 0, "cpu_s": 0.0})
        entry["cpu_s"] += float(line.get("cpu_s") or 0.0)
        if line.get("step") == Step.TRAIN:
            entry["kept"] = int(line.get("trained_prompts") or line.get("prompts_used") or 0)
    out = []
    for r in sorted(rounds):
        folder = run / f"round-{r:02d}"
        rates = {}
        for where in (TARGET, BEYOND):
            summary = folder / "bench" / where.split(":", 1)[1] / "summary.json"
            if summary.is_file():
                rates[where] = json.loads(summary.read_text())["overall"]["valid_rate"]
        if rates:
            out.append({**rounds[r], **rates})
    return out


def untrained(run: Path, groups: set[str]) -> tuple[int, int, list[str]]:
    """(training records read, of which in ``groups``, the groups trained on) over every round of the run; for a run
    exported by --export (no training records kept), the counts the check made before the export."""
    if (run / CHECKED).is_file() and not any(run.glob("round-*/train.jsonl")):
        done = json.loads((run / CHECKED).read_text())
        return int(done["records"]), int(done["in_never_trained"]), list(done["groups"])
    read = hits = 0
    seen: set[str] = set()
    for folder in sorted(p for p in run.glob("round-*") if p.is_dir()):
        for path in (folder / "train.jsonl", folder / "train" / "drawn.jsonl"):
            if path.is_file():
                for record in read_jsonl(path):
                    read += 1
                    group = str(record.get("group"))
                    seen.add(group)
                    hits += group in groups
    return read, hits, sorted(seen, key=lambda g: (len(g), g))


def pct(values: list[float]) -> str:
    return " ".join(f"{100 * v:.1f}" for v in values)


#: every table printed, in order, for --markdown
SHOWN: list[Table] = []


def show(console: Console, table: Table) -> None:
    console.print(table)
    SHOWN.append(table)


def analyse(output: Path, baselines: list[str], beyond: set[str], console: Console, equal_steps: bool = True,
            tests: list[tuple[str, str]] | None = None, primary: str = "instances") -> dict[str, Any]:
    """The tables and tests of one suite; ``beyond``: the never-trained set's groups; ``tests``: the pairs (A, B) of
    each target's family, B ``strongest`` for the strongest of ``baselines`` on that target (default: the first
    pre-registration's three); ``primary``: the test that decides "A beats B" (``instances`` or ``seeds``, see
    :func:`llm_engineer_claims.family`)."""
    tests = tests or DEFAULT_TESTS
    runs = arm_runs(output)
    if not runs:
        raise SystemExit(f"{output}: no runs (ARM/seed-N with history.jsonl)")
    result: dict[str, Any] = {"output": str(output), "arms": {}, "untrained": {}}
    outcomes: dict[str, dict[str, dict[int, dict[str, dict[str, bool]]]]] = {TARGET: {}, BEYOND: {}}
    table = Table(title=f"{output}: after the last round, per seed (greedy valid %)", title_justify="left")
    for column in ("arm", "seeds", "k9-k10 target", "mean", "k11-k12 never trained", "mean", "validation", "kept prompts (total)",
                   "CPU s (run)"):
        table.add_column(column)
    for arm, seeds in runs.items():
        for where in (TARGET, BEYOND):
            outcomes[where][arm] = {s: verdicts(run, where) for s, run in seeds.items()}
        rates = {w: {s: rate(v) for s, v in outcomes[w][arm].items()} for w in (TARGET, BEYOND)}
        val = {s: rate(verdicts(run, VALIDATION)) for s, run in seeds.items()}
        rounds = {s: per_round(run) for s, run in seeds.items()}
        kept = {s: sum(r["kept"] for r in rr) for s, rr in rounds.items()}
        cpu = {s: sum(r["cpu_s"] for r in rr) for s, rr in rounds.items()}
        checks = {s: untrained(run, beyond) for s, run in seeds.items()}
        result["untrained"][arm] = {s: {"records": c[0], "in_never_trained": c[1], "groups": c[2]} for s, c in checks.items()}
        result["arms"][arm] = {"seeds": list(seeds), "target": rates[TARGET], "beyond": rates[BEYOND], "validation": val,
                               "kept_total": kept, "cpu_s_total": cpu, "rounds": rounds}
        table.add_row(arm, " ".join(map(str, seeds)), pct(list(rates[TARGET].values())), f"{100 * statistics.fmean(rates[TARGET].values()):.1f}",
                      pct(list(rates[BEYOND].values())), f"{100 * statistics.fmean(rates[BEYOND].values()):.1f}", pct(list(val.values())),
                      " ".join(str(k) for k in kept.values()), " ".join(f"{c:.0f}" for c in cpu.values()))
    show(console, table)
    show(console, kept_table(result["arms"], output, marks=equal_steps))
    check = Table(title="never-trained check: training records read per run, and how many were walks of the never-trained "
                        f"lengths ({', '.join(sorted(beyond))}); passes at 0", title_justify="left")
    for column in ("arm", "records read (per seed)", "in never-trained groups", "groups trained on"):
        check.add_column(column)
    for arm, per_seed in result["untrained"].items():
        check.add_row(arm, " ".join(str(c["records"]) for c in per_seed.values()), " ".join(str(c["in_never_trained"]) for c in per_seed.values()),
                      ", ".join(sorted({g for c in per_seed.values() for g in c["groups"]}, key=lambda g: (len(g), g))))
    show(console, check)
    result["untrained_passes"] = all(c["in_never_trained"] == 0 for per_seed in result["untrained"].values() for c in per_seed.values())
    result["tests"] = []
    for where in (TARGET, BEYOND):
        label = _family_label(where)
        present = [b for b in baselines if b in outcomes[where]]
        strongest = max(present, key=lambda b: statistics.fmean(rate(v) for v in outcomes[where][b].values())) if present else None
        pairs = []
        for a, b in tests:
            b = strongest if b == STRONGEST else b
            if b and (a, b) not in pairs and a != b:
                pairs.append((a, b))
        rows = family(label, pairs, outcomes[where], primary=primary)
        for row in rows:
            row["strongest_baseline"] = strongest
        result["tests"] += rows
    title = ("pre-registered tests: the sign-flip permutation test over seeds (primary) and the walk-level sign test pooled over "
             "seeds (secondary), Holm within each target's family" if primary == "seeds" else
             "pre-registered tests: paired sign test over instances, pooled over seeds, Holm within each target's family")
    show(console, tests_table(result["tests"], title, family_column="target"))
    result["parts"] = {}
    for where in (TARGET, BEYOND):
        table, parts = parts_table(where, outcomes[where], result["tests"])
        result["parts"][where] = parts
        show(console, table)
    write_text(output / "steps.json", json.dumps(result, indent=2, default=str) + "\n")
    console.print(f"wrote {output / 'steps.json'}")
    return result


def parts_table(where: str, outcomes: dict[str, dict[int, dict[str, dict[str, bool]]]],
                tests: list[dict[str, Any]]) -> tuple[Table, dict[str, Any]]:
    """The target by its parts: each arm's greedy valid rate per grid size and per walk length (mean over seeds, each
    seed in the JSON), the set's composition beside it, and each tested pair's mean difference per part with the
    seed-level sign-flip p (descriptive: not adjusted, not part of the family)."""
    from envengineer.plugins.suite.arms.stats import seed_test

    records = {r["id"]: r for r in read_jsonl(_bench_path(where))}
    counts = {field: {str(v): sum(1 for r in records.values() if r.get(field) == v)
                      for v in sorted({r.get(field) for r in records.values()})} for field, _ in PARTS}
    columns = [f"{field}={value}" for field, _ in PARTS for value in counts[field]]
    label = {"size": lambda v: f"{v}x{v}", "k": lambda v: f"k{v}"}
    name = where.split(":", 1)[1]
    table = Table(title=f"{name} by its parts (greedy valid %, mean over seeds); the set: "
                        + ", ".join(f"{' / '.join(f'{label[f](v)} {n}' for v, n in counts[f].items())} by {title}"
                                    for f, title in PARTS), title_justify="left")
    table.add_column("arm or A − B")
    for column in columns:
        field, value = column.split("=", 1)
        table.add_column(label[field](value), justify="right")

    def part_rates(verdicts_: dict[str, dict[str, bool]]) -> dict[str, float | None]:
        """One seed's rate in every part, its verdicts read once."""
        hits: dict[str, list[bool]] = {column: [] for column in columns}
        for instance, verdict in verdicts_.items():
            record = records.get(instance, {})
            for field, _ in PARTS:
                column = f"{field}={record.get(field)}"
                if column in hits:
                    hits[column].append(verdict["valid"])
        return {column: sum(v) / len(v) if v else None for column, v in hits.items()}

    result: dict[str, Any] = {"composition": counts, "arms": {}, "tests": []}
    for arm, seeds in outcomes.items():
        by_seed = {s: part_rates(v) for s, v in seeds.items()}
        per = {column: {s: rates[column] for s, rates in by_seed.items()} for column in columns}
        result["arms"][arm] = per
        cells = []
        for column in columns:
            values = [x for x in per[column].values() if x is not None]
            cells.append(f"{100 * statistics.fmean(values):.1f}" if values else "")
        table.add_row(arm, *cells)
    for row in tests:
        if row["family"] != _family_label(where) or row["a"] not in result["arms"] or row["b"] not in result["arms"]:
            continue
        a, b = result["arms"][row["a"]], result["arms"][row["b"]]
        entry, cells = {"a": row["a"], "b": row["b"], "parts": {}}, []
        for column in columns:
            diffs = [a[column][s] - b[column][s] for s in sorted(set(a[column]) & set(b[column]))
                     if a[column][s] is not None and b[column][s] is not None]
            test = seed_test(diffs)
            entry["parts"][column] = {"diffs": diffs, "mean": test.mean if test else None, "p_seeds": test.p if test else None}
            cells.append(f"{100 * test.mean:+.1f}" + (f" (p {test.p:.2g})" if test.p is not None else "") if test else "")
        result["tests"].append(entry)
        table.add_row(f"{row['a']} − {row['b']}", *cells)
    return table, result


def parts_csv(result: dict[str, Any]) -> str:
    """Every arm's greedy valid rate per seed in every part of both targets (grid size, walk length), one row each."""
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["target", "arm", "seed", "part", "valid_rate"])
    for where, parts in result["parts"].items():
        for arm, per in parts["arms"].items():
            for part, seeds in per.items():
                for seed, value in seeds.items():
                    writer.writerow([where.split(":", 1)[1], arm, seed, part, "" if value is None else f"{value:.4f}"])
    return out.getvalue()


def _family_label(where: str) -> str:
    return {TARGET: "k9-k10 target", BEYOND: "k11-k12 never trained"}[where]


def kept_table(arms: dict[str, Any], output: Path, marks: bool = True) -> Table:
    """Kept prompts (mixed outcomes: what the optimizer steps on) per round, the mean over seeds; ``*`` (``marks``, at
    equal steps): a seed's round kept fewer than the arm's most, the draw cap having stopped the filling."""
    rounds = max((len(rr) for a in arms.values() for rr in a["rounds"].values()), default=0)
    table = Table(title=f"{output}: kept prompts per round (mean over seeds" + ("; * a seed's round stopped by the draw cap)" if marks
                        else ")"), title_justify="left")
    table.add_column("arm")
    for r in range(rounds):
        table.add_column(str(r), justify="right")
    for arm, a in arms.items():
        most = max((line["kept"] for rr in a["rounds"].values() for line in rr), default=0)
        cells = []
        for r in range(rounds):
            values = [rr[r]["kept"] for rr in a["rounds"].values() if len(rr) > r]
            cells.append(f"{statistics.fmean(values):.0f}" + ("*" if marks and any(v < most for v in values) else "") if values else "")
        table.add_row(arm, *cells)
    return table


def gap_table(primary: dict[str, Any], secondary: dict[str, Any]) -> tuple[Table, dict[str, Any]]:
    """P5: learnability − fixed on the target, per seed, at equal steps and at equal instances."""
    table = Table(title="P5: learnability − fixed on the k9-k10 target (points), per seed: equal steps, equal instances",
                  title_justify="left")
    for column in ("seed", "equal steps", "equal instances", "larger at equal instances"):
        table.add_column(column)
    rows = {}
    arms_p, arms_s = primary["arms"], secondary["arms"]
    if not all(a in arms for arms in (arms_p, arms_s) for a in (ENGINEER, FIXED)):
        return table, rows
    for seed in arms_p[ENGINEER]["target"]:
        if seed not in arms_s[ENGINEER]["target"] or seed not in arms_s[FIXED]["target"]:
            continue
        steps = 100 * (arms_p[ENGINEER]["target"][seed] - arms_p[FIXED]["target"][seed])
        instances = 100 * (arms_s[ENGINEER]["target"][seed] - arms_s[FIXED]["target"][seed])
        rows[seed] = {"equal_steps": steps, "equal_instances": instances, "larger": instances > steps}
        table.add_row(str(seed), f"{steps:+.1f}", f"{instances:+.1f}", "yes" if instances > steps else "no")
    return table, rows


def _bench_path(where: str) -> Path:
    from envengineer.registry import load_registry

    return load_registry(entry_points=False).benchmark(where.split(":", 1)[1]).path


def plot(results: list[dict[str, Any]], folder: Path) -> list[Path]:
    """The target after each round against cumulative kept prompts and CPU seconds, per arm (mean over seeds); and
    each seed's outcome on both targets in every arm, joined across the arms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from envengineer.fileio import atomic_open

    written = []
    for result in results:
        name = Path(result["output"]).name
        fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
        for arm, entry in result["arms"].items():
            per_seed = [r for r in entry["rounds"].values() if r]
            n = min(len(r) for r in per_seed)
            kept = [statistics.fmean(sum(x["kept"] for x in r[: i + 1]) for r in per_seed) for i in range(n)]
            cpu = [statistics.fmean(sum(x["cpu_s"] for x in r[: i + 1]) for r in per_seed) / 60 for i in range(n)]
            target = [100 * statistics.fmean(r[i].get(TARGET, 0.0) for r in per_seed) for i in range(n)]
            axes[0].plot(kept, target, marker=".", label=arm)
            axes[1].plot(cpu, target, marker=".", label=arm)
        axes[0].set_xlabel("cumulative kept prompts (optimizer steps x 8)")
        axes[1].set_xlabel("cumulative CPU minutes")
        axes[0].set_ylabel("grid-walk-target (k9-k10) greedy valid %")
        axes[1].legend(fontsize=8)
        fig.suptitle(f"{name}: the target against what training cost (mean over seeds)")
        fig.tight_layout()
        path = folder / f"steps-{name}.png"
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_open(path, "wb", encoding=None) as handle:
            fig.savefig(handle, format="png", dpi=110)
        plt.close(fig)
        written.append(path)
        # each seed's outcome in every arm, joined across the arms (the pairing the seed-level test uses), both targets
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
        arms = list(result["arms"])
        for axis, (key, title) in zip(axes, (("target", "grid-walk-target (k9-k10)"), ("beyond", "grid-walk-beyond (k11-k12, never trained)"))):
            seeds = sorted({s for entry in result["arms"].values() for s in entry[key]}, key=int)
            for seed in seeds:
                axis.plot(range(len(arms)), [100 * result["arms"][a][key].get(seed, float("nan")) for a in arms], color="grey",
                          alpha=0.45, linewidth=0.8, marker="o", markersize=3)
            means = [100 * statistics.fmean(result["arms"][a][key].values()) for a in arms]
            axis.scatter(range(len(arms)), means, color="black", marker="_", s=400, zorder=3, label="mean over seeds")
            axis.set_xticks(range(len(arms)), arms, rotation=25, ha="right", fontsize=8)
            axis.set_ylabel("greedy valid %")
            axis.set_title(f"{title}: each seed a line", fontsize=10)
        axes[0].legend(fontsize=8)
        fig.suptitle(f"{name}: after the last round, per seed")
        fig.tight_layout()
        path = folder / f"seeds-{name}.png"
        with atomic_open(path, "wb", encoding=None) as handle:
            fig.savefig(handle, format="png", dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def export(output: Path, folder: Path, beyond: set[str]) -> int:
    """Copy each finished run of ``output`` into ``folder``/<arm>/seed-N with what this script reads (FIGURES, and the
    last round's verdicts and answers) and its never-trained counts (CHECKED), made from the training records left
    out: a chunk of the comparison kept in the repository. Returns the runs exported."""
    from envengineer.fileio import write_json

    def counts(run: Path, target: Path) -> None:
        read, hits, groups = untrained(run, beyond)
        write_json(target / CHECKED, {"records": read, "in_never_trained": hits, "groups": groups})

    return export_runs(output, folder, FIGURES, LAST_ROUND_KEPT, extra=counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path, help="the primary suite's output folder (equal optimizer steps)")
    parser.add_argument("--secondary", type=Path, default=None, help="the secondary suite's output folder (equal instances)")
    parser.add_argument("--baselines", nargs="+", default=[FIXED, "fixed-band", "window", "rlve"],
                        help="the baselines the strongest is chosen from (per target, by mean)")
    parser.add_argument("--tests", nargs="+", default=[f"{a}:{b}" for a, b in DEFAULT_TESTS], metavar="A:B",
                        help="each target's family of tests, A against B (B 'strongest': the strongest of --baselines on that "
                        "target); default: the first pre-registration's")
    parser.add_argument("--primary", choices=["instances", "seeds"], default="instances",
                        help="the test that decides 'A beats B': instances (the walk-level sign test pooled over seeds, A higher at "
                        "every seed; the first pre-registration) or seeds (the sign-flip permutation test over the per-seed "
                        "differences, a positive mean; the second)")
    parser.add_argument("--plots", type=Path, default=None, help="write the cost plots into this folder")
    parser.add_argument("--markdown", type=Path, default=None, help="also write every table, in order, as markdown to this file")
    parser.add_argument("--export", type=Path, default=None, help="copy the finished runs' figures (no checkpoints, no training records; "
                        "their never-trained counts instead) into EXPORT/<suite folder name>/, e.g. bench/results/frontier-steps")
    args = parser.parse_args()
    console = Console(width=None if sys.stdout.isatty() else 160)
    beyond = {str(r.get("group")) for r in read_jsonl(_bench_path(BEYOND))}
    tests = []
    for spec in args.tests:
        a, sep, b = spec.partition(":")
        if not sep or not a or not b:
            parser.error(f"--tests: {spec!r} is not A:B")
        tests.append((a, b))
    results = [analyse(args.output, args.baselines, beyond, console, tests=tests, primary=args.primary)]
    if args.secondary:
        results.append(analyse(args.secondary, args.baselines, beyond, console, equal_steps=False, tests=tests, primary=args.primary))
    if len(results) == 2:
        table, rows = gap_table(*results)
        show(console, table)
        if rows:
            console.print(f"P5 holds at every seed: {'yes' if all(r['larger'] for r in rows.values()) else 'no'}")
    if not all(r["untrained_passes"] for r in results):
        console.print("[bold red]the never-trained check failed: a run trained on the never-trained lengths[/]")
    if args.markdown:
        write_text(args.markdown, "\n".join(markdown(t) for t in SHOWN))
        parts = args.markdown.with_name(args.markdown.stem + "-parts-per-seed.csv")
        write_text(parts, parts_csv(results[0]))
        console.print(f"wrote {args.markdown} and {parts}")
    if args.plots:
        for path in plot(results, args.plots):
            console.print(f"wrote {path}")
    if args.export:
        for folder in [args.output] + ([args.secondary] if args.secondary else []):
            n = export(folder, args.export / folder.name, beyond)
            console.print(f"exported {n} finished runs of {folder} to {args.export / folder.name}")
    raise SystemExit(0 if all(r["untrained_passes"] for r in results) else 1)


if __name__ == "__main__":
    main()
