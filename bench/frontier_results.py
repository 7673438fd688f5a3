"""Where each arm of a frontier suite got to: the held-out target and the frontier groups per round.

    python bench/frontier_results.py runs/frontier                # after envengineer suite examples/frontier ...
    python bench/frontier_results.py runs/frontier-long --groups k7 k8 k9

The suite's own tables (``<output>/<table>-arms.md``) give the pre-registered tests; this prints what
they do not: per arm, mean ± sd over seeds of

- the target's greedy valid rate after each round (every ``bench/*`` set the runs evaluated);
- the validation valid rate of the frontier groups (``--groups``, default k6 k7 k8) after each round;
- the prompts GRPO trained on each round (the prefilter's kept prompts, in whole optimizer steps), from each
  round's ``train/signal.json``, and their total over the runs that finished every round;
- the first round at which a group's validation rate reached 50%, per seed ("-": never);
- with ``--fresh N``: each finished run's last checkpoint, greedy, on N fresh walks per group of ``--fresh-groups``
  (the same walks for every run, N/5 per grid size 3-7, seeded by ``frontier-fresh``: never a training or
  validation stream), so the frontier is measured on walks no engineer saw; with the seed-level Welch and
  permutation tests against ``--baseline``;
- on the target after the last round, graded: how many cells an answer writes, how many leading cells are
  right (the walk followed correctly that far), and the share of answers of the right length, per walk length.

It reads only the run folders (``<output>/<arm>/seed-<s>/``), so it works on a partial suite.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
from pathlib import Path
from typing import Any

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


@functools.lru_cache(maxsize=None)
def registry() -> Any:
    from envengineer.registry import load_registry

    return load_registry(entry_points=False)


@functools.lru_cache(maxsize=None)
def bench_records(bench: str) -> dict[str, dict]:
    """A frozen set's records by id (read once for every run)."""
    return {r["id"]: r for r in map(json.loads, registry().benchmark(bench).path.read_text().splitlines())}


@functools.lru_cache(maxsize=None)
def fresh_walks(group: str, n: int) -> list[dict]:
    """``n`` fresh walks of ``group``, n/5 per grid size 3-7: the same for every run."""
    from envengineer.tasks.gridwalk.knobs import MAX_SIZE, MIN_SIZE, moves_of
    from envengineer.tasks.gridwalk.walk import make_record

    k, sizes = moves_of(group), range(MIN_SIZE, MAX_SIZE + 1)
    return [make_record(f"frontier-fresh|{k}|{size}|{i}", size, k) for size in sizes for i in range(n // len(sizes))]


def graded(run: Path, bench: str) -> dict[int, dict[str, float]] | None:
    """The last round's answers on ``bench`` (a grid-walk set): per walk length, the mean cells written,
    the mean right leading cells and the share of answers with k cells."""
    from envengineer.tasks.gridwalk.walk import solve

    rounds = sorted(run.glob(f"round-*/bench/{bench}/responses.jsonl"))
    if not rounds:
        return None
    records = bench_records(bench)
    out: dict[int, list[tuple[int, int, bool]]] = {}
    for line in rounds[-1].read_text().splitlines():
        answer = json.loads(line)
        record = records[answer["id"]]
        truth = [f"{r}_{c}" for r, c in solve(record)]
        words = answer["response"].split()
        prefix = next((i for i, (a, b) in enumerate(zip(words, truth)) if a != b), min(len(words), len(truth)))
        out.setdefault(record["k"], []).append((len(words), prefix, len(words) == len(truth)))
    return {k: {"cells": statistics.fmean(v[0] for v in rows), "prefix": statistics.fmean(v[1] for v in rows),
                "length_ok": statistics.fmean(v[2] for v in rows)} for k, rows in sorted(out.items())}


def fresh_rates(run: Path, groups: list[str], n: int) -> dict[str, float] | None:
    """The run's last checkpoint, greedy, on ``n`` fresh walks of each group: the valid share per group."""
    from envengineer.loop.evaluation import score_response

    checkpoints = sorted(run.glob("round-*/train/checkpoint/config.json"))
    if not checkpoints:
        return None
    generator, validator = registry().task("grid-walk", {"prompt_style": "compact"})
    policy = registry().create("policy", "transformers", {"path": str(checkpoints[-1].parent), "prompt_style": "compact",
                                                          "max_new_tokens": 16, "temperature": 0, "threads": 1})
    rates = {}
    for group in groups:
        records = fresh_walks(group, n)
        answers = policy.sample_records(generator, records, style="compact", n=1)
        rates[group] = statistics.fmean(score_response(validator, generator, r, a[0], "compact").valid for r, a in zip(records, answers))
    policy.close()
    return rates


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
    parser.add_argument("--fresh", type=int, default=0, help="fresh walks per group for the last checkpoints (0: skip)")
    parser.add_argument("--fresh-groups", nargs="+", default=["k6", "k7", "k8", "k9"])
    parser.add_argument("--baseline", default="fixed")
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
    if args.fresh:
        from envengineer.plugins.suite.arms.stats import permutation_test, welch

        finished = {arm: [s for s, r in seeds.items() if len(r) == rounds] for arm, seeds in arms.items()}
        fresh = {arm: [fresh_rates(args.output / arm / f"seed-{s}", args.fresh_groups, args.fresh) for s in ss] for arm, ss in finished.items()}
        table = Table(title=f"the last checkpoints on {args.fresh} fresh walks per group, greedy valid % (mean ± sd over seeds; "
                            f"vs {args.baseline}: difference, Welch p, permutation p)")
        table.add_column("arm")
        for group in args.fresh_groups:
            table.add_column(group, justify="right")
            table.add_column(f"vs {args.baseline}", justify="right")
        base = fresh.get(args.baseline, [])
        for arm, per_seed in fresh.items():
            row = []
            for group in args.fresh_groups:
                values = [r[group] for r in per_seed if r]
                ref = [r[group] for r in base if r]
                row.append(cell(values))
                if arm == args.baseline or not values or not ref:
                    row.append("")
                    continue
                w, perm = welch(values, ref), permutation_test(values, ref)
                row.append(f"{100 * (statistics.fmean(values) - statistics.fmean(ref)):+.1f} "
                           f"(p={w.p:.3f}, {perm.p:.3f})" if w and w.p is not None and perm else
                           f"{100 * (statistics.fmean(values) - statistics.fmean(ref)):+.1f}")
            table.add_row(arm, *row)
        console.print(table)
    for bench in benches:
        if not bench.startswith("grid-walk"):
            continue
        table = Table(title=f"{bench} after the last round, graded (mean ± sd over seeds): cells written, right leading cells, "
                            "answers of the right length %")
        table.add_column("arm")
        lengths = (9, 10)
        for k in lengths:
            table.add_column(f"k{k} cells", justify="right")
            table.add_column(f"k{k} right prefix", justify="right")
            table.add_column(f"k{k} length ok", justify="right")
        for arm, seeds in arms.items():
            per_seed = [graded(args.output / arm / f"seed-{s}", bench) for s, rounds_done in seeds.items() if len(rounds_done) == rounds]
            per_seed = [g for g in per_seed if g]
            row = []
            for k in lengths:
                row += [cell([g[k]["cells"] for g in per_seed if k in g], 1, 2), cell([g[k]["prefix"] for g in per_seed if k in g], 1, 2),
                        cell([g[k]["length_ok"] for g in per_seed if k in g])]
            table.add_row(arm, *row)
        console.print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
