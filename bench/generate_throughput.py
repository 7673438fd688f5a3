"""How long a round's training set takes: N certified instances of a config, on one core.

    python bench/generate_throughput.py                 # 4000 two-agent instances, default config
    python bench/generate_throughput.py --agents 3 --n 1000 --workers 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from rich.console import Console
from rich.table import Table

from envengineer.tasks.mapf_frozenlake.knobs import uniform_config
from envengineer.tasks.mapf_frozenlake.draw import generate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--wait-ratio", type=float, default=0.3)
    args = parser.parse_args()
    if args.workers == 1 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    config = uniform_config(wait_ratio=args.wait_ratio)
    times = []
    for repeat in range(args.repeats):
        started = time.perf_counter()
        instances, discarded = generate(config, n=args.n, seed=args.seed + repeat, agents=args.agents, workers=args.workers)
        times.append(time.perf_counter() - started)
    table = Table(title=f"generate {args.n} {args.agents}-agent instances (uniform config, wait_ratio {args.wait_ratio}, {args.workers} worker(s))")
    for column in ("runs", "median s", "best s", "instances/s", "requires_wait", "discarded"):
        table.add_column(column, justify="right")
    best = min(times)
    table.add_row(
        str(len(times)), f"{statistics.median(times):.2f}", f"{best:.2f}", f"{args.n / best:.0f}",
        f"{sum(i.requires_wait for i in instances)}/{len(instances)}", str(discarded or "none"),
    )
    Console().print(table)


if __name__ == "__main__":
    main()
