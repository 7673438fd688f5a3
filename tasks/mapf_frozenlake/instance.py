"""The instance record of mapf-frozenlake.md, and its stable id.

A record is plain JSON data; :class:`Instance` is its checked, typed view. The id is
derived from the content (size, agent count and a digest of grid and agents), so the
same instance always gets the same id whatever seed or config produced it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Cell = tuple[int, int]


@dataclass(frozen=True)
class Agent:
    start: Cell
    goal: Cell


@dataclass(frozen=True)
class Instance:
    size: int
    grid: tuple[str, ...]
    agents: tuple[Agent, ...]
    hole_ratio: float
    optimal_cost: int | None = None
    requires_wait: bool | None = None
    seed: int = 0
    id: str = ""

    @property
    def k(self) -> int:
        return len(self.agents)

    def is_hole(self, cell: Cell) -> bool:
        r, c = cell
        return self.grid[r][c] == "H"

    def holes(self) -> list[Cell]:
        return [(r, c) for r, row in enumerate(self.grid) for c, ch in enumerate(row) if ch == "H"]

    def to_record(self) -> dict[str, Any]:
        """The JSONL record, keys in the contract's order."""
        return {
            "id": self.id or instance_id(self.size, self.grid, self.agents),
            "size": self.size,
            "grid": list(self.grid),
            "agents": [{"start": list(a.start), "goal": list(a.goal)} for a in self.agents],
            "hole_ratio": self.hole_ratio,
            "optimal_cost": self.optimal_cost,
            "requires_wait": self.requires_wait,
            "seed": self.seed,
        }


def instance_id(size: int, grid: Sequence[str], agents: Sequence[Agent]) -> str:
    """``mfl-<N>x<N>-<k>a-<digest>``: unique and stable for the instance's content."""
    canonical = json.dumps(
        [list(grid), [[list(a.start), list(a.goal)] for a in agents]], separators=(",", ":")
    )
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:12]
    return f"mfl-{size}x{size}-{len(agents)}a-{digest}"


def _cell(value: Any, where: str) -> Cell:
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise ValueError(f"{where}: expected [row, col] integers, got {value!r}")
    return (value[0], value[1])


def from_record(record: Mapping[str, Any]) -> Instance:
    """Check a record against the contract and return its typed view.

    Raises ``ValueError`` naming the field on malformed input.
    """
    if not isinstance(record, Mapping):
        raise ValueError(f"instance must be a JSON object, got {type(record).__name__}")
    try:
        size = record["size"]
        grid = record["grid"]
        agents = record["agents"]
    except KeyError as exc:
        raise ValueError(f"instance is missing field {exc.args[0]!r}") from None
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(f"size: expected a positive integer, got {size!r}")
    if not isinstance(grid, list) or len(grid) != size or not all(
        isinstance(row, str) and len(row) == size and set(row) <= {"F", "H"} for row in grid
    ):
        raise ValueError(f"grid: expected {size} strings of {size} 'F'/'H' characters")
    if not isinstance(agents, list) or not agents:
        raise ValueError("agents: expected a non-empty list")
    parsed = []
    for i, agent in enumerate(agents):
        if not isinstance(agent, Mapping) or "start" not in agent or "goal" not in agent:
            raise ValueError(f"agents[{i}]: expected {{'start': [r, c], 'goal': [r, c]}}")
        start = _cell(agent["start"], f"agents[{i}].start")
        goal = _cell(agent["goal"], f"agents[{i}].goal")
        for name, (r, c) in (("start", start), ("goal", goal)):
            if not (0 <= r < size and 0 <= c < size):
                raise ValueError(f"agents[{i}].{name}: {(r, c)} is outside the {size}x{size} grid")
            if grid[r][c] != "F":
                raise ValueError(f"agents[{i}].{name}: {(r, c)} is a hole")
        parsed.append(Agent(start, goal))
    optimal_cost = record.get("optimal_cost")
    if optimal_cost is not None and (not isinstance(optimal_cost, int) or isinstance(optimal_cost, bool)):
        raise ValueError(f"optimal_cost: expected an integer or null, got {optimal_cost!r}")
    requires_wait = record.get("requires_wait")
    if requires_wait is not None and not isinstance(requires_wait, bool):
        raise ValueError(f"requires_wait: expected a boolean or null, got {requires_wait!r}")
    hole_ratio = record.get("hole_ratio")
    if hole_ratio is None:
        hole_ratio = sum(row.count("H") for row in grid) / (size * size)
    instance = Instance(
        size=size,
        grid=tuple(grid),
        agents=tuple(parsed),
        hole_ratio=float(hole_ratio),
        optimal_cost=optimal_cost,
        requires_wait=requires_wait,
        seed=int(record.get("seed", 0) or 0),
        id="",
    )
    rid = record.get("id")
    return Instance(**{**instance.__dict__, "id": str(rid) if rid else instance_id(size, grid, parsed)})
