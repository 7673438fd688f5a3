"""Where each arm of a frontier suite got to: the held-out target and the frontier groups per round.

    python bench/frontier_results.py runs/frontier                # after envengineer suite examples/frontier ...
    python bench/frontier_results.py runs/frontier-long --groups k7 k8 k9

The suite's own tables (``<output>/<table>-arms.md``) give the pre-registered tests; this prints what
they do not: per arm, mean ± sd over seeds of

- the target's greedy valid rate after each round (every ``bench/*`` set the runs evaluated);
- the validation valid rate of the frontier groups (``--groups``, default k6 k7 k8) after each round;
- the prompts GRPO trained on each round (the prefilter's kept prompts, in whole optimizer steps), from each
  round's ``train/signal.json``, and their total over the runs that finished every round;
- the first round at which a group's validation rate reached 50%, per seed ("-": never).

It reads only the run folders (``<output>/<arm>/seed-<s>/``), so it works on a partial suite.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table


def load(run: Path) -> list[dict]:
    """One entry per finished round: its validation rates by group, the benchmarks' rates and the kept prompts."""
    rounds = []
    for folder in sorted(run.glob("round-*")):
        summary = folder / "eval" / "summary.json"
        signal = folder / "train" / "signal.json"
        if not summary.is_file():
            break
        by = json.loads(summary.read_text())["by"]
        groups = {g: v["valid_rate"] for g, v in next(iter(by.values())).items()}
        bench = {}
        for bench_summary in folder.glob("bench/*/summary.json"):
            bench[bench_summary.parent.name] = json.loads(bench_summary.read_text())["overall"]["valid_rate"]
        kept = json.loads(signal.read_text())["overall"].get("kept") if signal.is_file() else None
        rounds.append({"groups": groups, "bench": bench, "kept": kept})
    return rounds


def cell(values: list[float], scale: float = 100.0, digits: int = 1) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    mean = statistics.fmean(values) * scale
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {statistics.stdev(values) * scale:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", type=Path, help="the suite's output folder")
    parser.add_argument("--groups", nargs="+", default=["k6", "k7", "k8"], help="validation groups to follow")
    args = parser.parse_args(argv)
    console = Console()
    arms = {}
    for arm in sorted(p for p in args.output.iterdir() if p.is_dir() and any(p.glob("seed-*/round-00"))):
        arms[arm.name] = {int(s.name.split("-")[1]): load(s) for s in sorted(arm.glob("seed-*")) if s.is_dir()}
    if not arms:
        console.print(f"no runs under {args.output}")
        return 1
    rounds = max(len(r) for seeds in arms.values() for r in seeds.values())
    benches = sorted({b for seeds in arms.values() for r in seeds.values() for x in r for b in x["bench"]})

    def per_round(title: str, value) -> None:
        table = Table(title=title)
        table.add_column("arm")
        for r in range(rounds):
            table.add_column(f"r{r}", justify="right")
        for arm, seeds in arms.items():
            table.add_row(arm, *[cell([value(s[r]) for s in seeds.values() if len(s) > r]) for r in range(rounds)])
        console.print(table)

    for bench in benches:
        per_round(f"{bench}: greedy valid % after each round (mean ± sd over seeds)", lambda x, b=bench: x["bench"].get(b))
    for group in args.groups:
        per_round(f"validation {group}: greedy valid % after each round", lambda x, g=group: x["groups"].get(g))
    table = Table(title="prompts GRPO trained on each round (mean ± sd over seeds); total: finished runs only")
    table.add_column("arm")
    for r in range(rounds):
        table.add_column(f"r{r}", justify="right")
    table.add_column("total", justify="right")
    for arm, seeds in arms.items():
        totals = [sum(x["kept"] or 0 for x in s) for s in seeds.values() if len(s) == rounds]
        table.add_row(arm, *[cell([s[r]["kept"] for s in seeds.values() if len(s) > r], 1, 0) for r in range(rounds)], cell(totals, 1, 0))
    console.print(table)
    table = Table(title="first round at which a validation group reached 50% (per seed; -: never)")
    table.add_column("arm")
    for group in args.groups:
        table.add_column(group, justify="right")
    for arm, seeds in arms.items():
        row = []
        for group in args.groups:
            firsts = [next((str(i) for i, x in enumerate(s) if (x["groups"].get(group) or 0) >= 0.5), "-") for s in seeds.values()]
            row.append(" ".join(firsts))
        table.add_row(arm, *row)
    console.print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
