"""Compare the solver with an earlier revision's on random draws: status, cost and paths.

    python bench/solver_regression.py --against 268d855 --n 1500 --seed 1

Each draw (size 3–10, 2–5 agents, hole ratio 0–0.3) is solved by both solvers twice: with
the generator's work limit (40,000 units) and with a 10 s time limit. Draws the earlier
solver gives up on are counted, not compared; every difference is printed. Exit status 1
if any draw differs.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def git_show(rev: str, path: str) -> str:
    return subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def load_revision(rev: str):
    """The solver at ``rev``, apart from the installed one: the package solver/ (its modules
    import one another relatively, so the copy imports only itself), or the single module
    solver.py of earlier revisions."""
    where = Path(tempfile.mkdtemp()) / "solver_at_revision"
    listing = subprocess.run(["git", "ls-tree", "--name-only", f"{rev}:tasks/mapf_frozenlake/solver"], cwd=ROOT,
                             capture_output=True, text=True)
    if listing.returncode == 0:
        where.mkdir()
        for name in listing.stdout.split():
            if name.endswith(".py"):
                (where / name).write_text(git_show(rev, f"tasks/mapf_frozenlake/solver/{name}"))
        spec = importlib.util.spec_from_file_location("solver_at_revision", where / "__init__.py",
                                                      submodule_search_locations=[str(where)])
    else:
        path = where.with_suffix(".py")
        path.write_text(git_show(rev, "tasks/mapf_frozenlake/solver.py"))
        spec = importlib.util.spec_from_file_location("solver_at_revision", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def key(solution):
    paths = [tuple(map(tuple, p)) for p in solution.paths] if solution.paths else None
    return solution.status, solution.cost, paths


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", required=True, help="git revision of the earlier solver")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from envengineer.tasks.mapf_frozenlake import solver as current

    earlier = load_revision(args.against)
    rng = random.Random(args.seed)
    counts = {"same": 0, "different": 0, "earlier_gave_up": 0, "skipped": 0}
    started = time.perf_counter()
    for _ in range(args.n):
        size, k, hole_ratio = rng.randint(3, 10), rng.randint(2, 5), rng.choice([0.0, 0.1, 0.2, 0.3])
        cells = [(r, c) for r in range(size) for c in range(size)]
        holes = set(rng.sample(cells, int(hole_ratio * size * size)))
        free = [c for c in cells if c not in holes]
        if len(free) < 2 * k:
            counts["skipped"] += 1
            continue
        agents = list(zip(rng.sample(free, k), rng.sample(free, k)))
        grid = ["".join("H" if (r, c) in holes else "F" for c in range(size)) for r in range(size)]
        for limits in ({"work_limit": 40_000, "time_limit": 60.0}, {"time_limit": 10.0}):
            before = earlier.solve(grid, agents, **limits)
            if before.status not in ("optimal", "unsolvable"):
                counts["earlier_gave_up"] += 1
                continue
            after = current.solve(grid, agents, **limits)
            if key(before) == key(after):
                counts["same"] += 1
            else:
                counts["different"] += 1
                print("DIFFERENT", limits, grid, agents, key(before)[:2], key(after)[:2], flush=True)
    print(f"{counts}  ({time.perf_counter() - started:.0f} s)")
    return 1 if counts["different"] else 0


if __name__ == "__main__":
    sys.exit(main())
