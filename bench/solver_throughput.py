"""Throughput of the MAPF-FrozenLake solver on random instances.

Instances are drawn deterministically from ``random.Random(seed)``: a map with
``round(holes * N * N)`` holes, then k distinct starts and k distinct goals on free
cells with no agent starting on its own goal. Every instance is solved and timed;
the table shows instances/s and the time tail, because the slowest few percent
decide how fast a generator can certify data.

A solve gives up after ``--work-cap`` units of search work (``Solution.work``; every
search on, the fallbacks of three or more agents included), never after a number of
seconds: the statuses (optimal / unsolvable / gave_up) and the work column are the
same on every machine, only the times differ.

    python bench/solver_throughput.py                 # 2 and 5 agents, 10x10, 20% holes
    python bench/solver_throughput.py --agents 5 --n 2000 --seed 1
    taskset -c 0 python bench/solver_throughput.py    # pin to one core
"""

from __future__ import annotations

import argparse
import random
import time
from collections import Counter

from envengineer.tasks.mapf_frozenlake.solver import solve

#: The default give-up: 200,000 units of search work. The slowest draw of the documented runs
#: (5 agents, n = 10,000, seed 3: cost 86, lower bound 69) needs 74,487.
WORK_CAP = 200_000


def draw(rng: random.Random, size: int, holes: float, k: int):
    cells = [(r, c) for r in range(size) for c in range(size)]
    while True:
        hole_set = set(rng.sample(cells, round(holes * size * size)))
        free = [c for c in cells if c not in hole_set]
        if len(free) > k:
            break
    grid = ["".join("H" if (r, c) in hole_set else "F" for c in range(size)) for r in range(size)]
    starts = rng.sample(free, k)
    while True:
        goals = rng.sample(free, k)
        if all(s != g for s, g in zip(starts, goals)):
            return grid, list(zip(starts, goals))


def run(k: int, size: int, holes: float, n: int, seed: int, work_cap: int, show_slow: int) -> None:
    rng = random.Random(seed)
    instances = [draw(rng, size, holes, k) for _ in range(n)]
    times = []
    status = Counter()
    waits = 0
    slow = []
    wall0 = time.perf_counter()
    for grid, agents in instances:
        t0 = time.perf_counter()
        sol = solve(grid, agents, work_cap=work_cap)
        dt = time.perf_counter() - t0
        times.append(dt)
        status[sol.status] += 1
        waits += bool(sol.requires_wait)
        slow.append((dt, sol.status, sol.nodes, sol.work, sol.cost, sol.lower_bound, grid, agents))
    wall = time.perf_counter() - wall0
    times.sort()

    def q(p: float) -> float:
        return times[min(len(times) - 1, int(p * len(times)))] * 1000

    optimal = status.get("optimal", 0)
    print(
        f"{k} agents {size}x{size} holes={holes:.2f} n={n} seed={seed}: "
        f"{n / wall:8.1f} inst/s | median {q(0.5):7.2f} ms  p95 {q(0.95):7.2f} ms  "
        f"p99 {q(0.99):8.2f} ms  max {times[-1] * 1000:8.1f} ms | "
        + "  ".join(f"{s}={c}" for s, c in sorted(status.items()))
        + f" | requires_wait {waits / max(1, optimal):.1%} of optimal"
        + f" | work max {max(s[3] for s in slow)} of cap {work_cap}"
    )
    if show_slow:
        slow.sort(key=lambda x: -x[0])
        for dt, st, nodes, work, cost, lb, grid, agents in slow[:show_slow]:
            print(f"   {dt * 1000:8.1f} ms {st:10s} nodes={nodes:6d} work={work:7d} cost={cost} lower_bound={lb} {grid} {agents}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, nargs="*", default=[2, 5], help="agent counts to run (default: 2 5)")
    ap.add_argument("--size", type=int, default=10)
    ap.add_argument("--holes", type=float, default=0.2)
    ap.add_argument("--n", type=int, default=1000, help="instances per agent count")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work-cap", type=int, default=WORK_CAP,
                    help=f"per-instance give-up in units of search work, the same on every machine (default {WORK_CAP:,})")
    ap.add_argument("--show-slow", type=int, default=0, help="print the N slowest instances")
    args = ap.parse_args()
    if args.work_cap < 1:
        ap.error(f"--work-cap: a positive number of work units, got {args.work_cap}")
    for k in args.agents:
        run(k, args.size, args.holes, args.n, args.seed, args.work_cap, args.show_slow)


if __name__ == "__main__":
    main()
