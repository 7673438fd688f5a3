"""A walk: drawn from a seed, as a record, and replayed (the cells visited, never read from the record)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}


def walk(rng: random.Random, size: int, k: int) -> dict[str, Any]:
    """A start cell and ``k`` moves that stay on the ``size`` x ``size`` grid, and the cells visited."""
    row, col = rng.randrange(size), rng.randrange(size)
    start, moves, path = [row, col], [], []
    for _ in range(k):
        allowed = [m for m, (dr, dc) in MOVES.items() if 0 <= row + dr < size and 0 <= col + dc < size]
        move = rng.choice(allowed)
        row, col = row + MOVES[move][0], col + MOVES[move][1]
        moves.append(move)
        path.append([row, col])
    return {"size": size, "start": start, "moves": "".join(moves), "k": k, "path": path}


def make_record(key: str, size: int, k: int) -> dict[str, Any]:
    """The walk seeded by ``key`` (a string: the same on every machine), as a record."""
    record = walk(random.Random(f"grid-walk|{key}"), size, k)
    return {"id": f"gw-{size}-{k}-{record['start'][0]}_{record['start'][1]}-{record['moves']}", "group": f"k{k}", **record}


def cells_text(path: list[list[int]]) -> str:
    return " ".join(f"{r}_{c}" for r, c in path)


def solve(record: Mapping[str, Any]) -> list[list[int]]:
    """The cells visited, recomputed from the start and the moves (never read from the record)."""
    row, col = record["start"]
    path = []
    for move in record["moves"]:
        row, col = row + MOVES[move][0], col + MOVES[move][1]
        path.append([row, col])
    return path
