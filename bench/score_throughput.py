"""Throughput of the MAPF-FrozenLake validator, and its cost on 1 MB adversarial responses.

Builds random 2-agent instances from hand-made conflict-free paths (no solver needed),
typical responses to them (valid, and mutated into each failure type, some after a
short ``</think>`` section), and scores them on one core.

    python bench/score_throughput.py [--instances 500] [--responses 20000] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from envengineer.tasks.mapf_frozenlake.answer import format_answer, parse_answer
from envengineer.tasks.mapf_frozenlake.validator import MapfValidator, solution_cost

MB = 1 << 20
MOVES = ((0, 1), (1, 0), (0, -1), (-1, 0))


def _walk(rng: random.Random, n: int, start: tuple[int, int], length: int) -> list[tuple[int, int]]:
    path = [start]
    while len(path) < length:
        r, c = path[-1]
        options = [(r + dr, c + dc) for dr, dc in MOVES if 0 <= r + dr < n and 0 <= c + dc < n]
        nxt = rng.choice(options)
        if nxt not in path or rng.random() < 0.1:
            path.append(nxt)
        elif rng.random() < 0.2:
            path.append(path[-1])  # a wait
    return path


def _conflict_free(p: list, q: list) -> bool:
    horizon = max(len(p), len(q))
    at = lambda path, t: path[min(t, len(path) - 1)]  # noqa: E731
    for t in range(horizon):
        if at(p, t) == at(q, t):
            return False
        if t + 1 < horizon and at(p, t) == at(q, t + 1) and at(p, t + 1) == at(q, t):
            return False
    return True


def make_instance(rng: random.Random, index: int) -> tuple[dict, list[list[tuple[int, int]]]]:
    """A random 2-agent record and a valid (not necessarily optimal) solution of it."""
    while True:
        n = rng.randint(3, 10)
        cells = [(r, c) for r in range(n) for c in range(n)]
        s1, s2 = rng.sample(cells, 2)
        p1 = _walk(rng, n, s1, rng.randint(max(3, n - 1), 2 * n))
        p2 = _walk(rng, n, s2, rng.randint(max(3, n - 1), 2 * n))
        if p1[-1] in (p1[0], p2[-1]) or p2[-1] == p2[0] or not _conflict_free(p1, p2):
            continue
        used = set(p1) | set(p2)
        free = [cell for cell in cells if cell not in used]
        holes = set(rng.sample(free, min(len(free), round(0.2 * n * n))))
        grid = ["".join("H" if (r, c) in holes else "F" for c in range(n)) for r in range(n)]
        goals = [p1[-1], p2[-1]]
        record = {
            "id": f"bench-{index}",
            "size": n,
            "grid": grid,
            "agents": [{"start": list(p[0]), "goal": list(p[-1])} for p in (p1, p2)],
            "hole_ratio": len(holes) / (n * n),
            "optimal_cost": solution_cost([p1, p2], goals),
            "requires_wait": False,
            "seed": index,
        }
        return record, [p1, p2]


def mutate(rng: random.Random, record: dict, paths: list[list[tuple[int, int]]]) -> str:
    """A typical invalid response: one random mistake in a valid answer."""
    p1, p2 = [list(p) for p in paths]
    kind = rng.randrange(9)
    if kind == 0:
        return "I think agent 1 should go right, then down."
    if kind == 1:
        return format_answer([p1])
    if kind == 2:
        p1[0] = p2[0]
    elif kind == 3:
        p1.append((record["size"], 0))
    elif kind == 4:
        p1.append((p1[-1][0] + 2, p1[-1][1]))
    elif kind == 5:
        holes = [(r, c) for r, row in enumerate(record["grid"]) for c, ch in enumerate(row) if ch == "H"]
        p1.insert(1, rng.choice(holes) if holes else (9, 9))
    elif kind == 6:
        p2 = [p2[0]] + p1[1:] + [p2[-1]]
    elif kind == 7:
        p1 = p1[:-1]
    else:
        return format_answer([p1, p2]).replace(") -> (", ") then (", 1)
    return format_answer([p1, p2])


def typical_responses(n_instances: int, n_responses: int, seed: int) -> list[tuple[dict, str]]:
    rng = random.Random(seed)
    instances = [make_instance(rng, i) for i in range(n_instances)]
    think = "<think>\nAgent 1 goes around the hole; agent 2 waits once.\n</think>\n"
    out = []
    for _ in range(n_responses):
        record, paths = rng.choice(instances)
        text = format_answer(paths) if rng.random() < 0.5 else mutate(rng, record, paths)
        if rng.random() < 0.5:
            text = think + text
        out.append((record, text))
    return out


def garbage() -> dict[str, str]:
    """1 MB responses built to hit the parser's worst cases."""
    rng = random.Random(1)
    step = "(1,1) -> "
    return {
        "random bytes (latin-1)": rng.randbytes(MB).decode("latin-1"),
        "random bytes (utf-8, replace)": rng.randbytes(MB).decode("utf-8", "replace"),
        '"(1,1) -> " repeated': step * (MB // len(step)),
        "one agent, 116k-cell path": "<answer>\nAgent 1: " + step * (MB // len(step)) + "(1,1)\n</answer>",
        "two agents, 58k cells each": "<answer>\nAgent 1: "
        + step * (MB // 18)
        + "(1,1)\nAgent 2: "
        + "(2,2) -> " * (MB // 18)
        + "(2,2)\n</answer>",
        "nested unclosed tags": "<answer><think>" * (MB // 15),
        "many closed blocks": "<answer>Agent 1: (0,0)</answer>" * (MB // 31),
        "unclosed + one close at end": "<answer>" * (MB // 8) + "</answer>",
        "giant coordinate": "<answer>Agent 1: (" + "9" * MB + ",1)</answer>",
        "giant agent number": "Agent " + "9" * MB + ": (0,0)",
        "repeated agent line": "Agent 1: (0,0) -> (0,1)\n" * (MB // 24),
        "distinct agent lines": "".join(f"Agent {i}: ({i},{i})\n" for i in range(MB // 24)),
        "whitespace then bad": "Agent 1: (0," + " " * MB + "x)",
        "open parens": "Agent 1: " + "(" * MB,
        "'Agent' repeated": "Agent" * (MB // 5),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=500)
    parser.add_argument("--responses", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):  # one core, as the figure claims
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    work = typical_responses(args.instances, args.responses, args.seed)
    validator = MapfValidator()
    for record, text in work[:1000]:  # warm the instance cache and the regexes
        validator.score(record, text)
    rates = []
    for _ in range(5):
        t0 = time.perf_counter()
        for record, text in work:
            validator.score(record, text)
        rates.append(len(work) / (time.perf_counter() - t0))
    t0 = time.perf_counter()
    for _, text in work:
        parse_answer(text)
    parse_rate = len(work) / (time.perf_counter() - t0)
    verdicts = [validator.score(record, text) for record, text in work]
    share_valid = sum(v.valid for v in verdicts) / len(verdicts)
    mean_len = statistics.mean(len(text) for _, text in work)

    print(f"typical responses: {len(work)} on {args.instances} instances, "
          f"{share_valid:.0%} valid, mean {mean_len:.0f} chars")
    print(f"{'MapfValidator.score':<34}{statistics.median(rates):>12,.0f} responses/s (median of 5; best {max(rates):,.0f})")
    print(f"{'parse_answer only':<34}{parse_rate:>12,.0f} responses/s")
    print()
    print(f"{'1 MB response':<34}{'ms (best of 5)':>16}  verdict")
    for name, text in garbage().items():
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            verdict = validator.score(work[0][0], text)
            times.append(time.perf_counter() - t0)
        checks = ",".join(verdict.failed_checks) or "valid"
        print(f"{name:<34}{min(times) * 1e3:>16.1f}  {checks}")


if __name__ == "__main__":
    main()
