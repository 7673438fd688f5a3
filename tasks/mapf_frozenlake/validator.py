"""The eight checks of mapf-frozenlake.md, the verdict, and the cost of a solution.

Every check that can be evaluated is evaluated, so a verdict lists all that failed;
only a ``parse`` failure stops the rest. Choices the contract leaves open:

- Checks after ``agent_count`` look only at the instance's agents 1..k that have a
  line (the last line of a repeated number); lines for other numbers (0, k+1, …)
  only fail ``agent_count``.
- ``hole`` looks at in-bounds cells only (an out-of-bounds cell is neither frozen nor
  a hole); a first cell on a hole counts.
- ``conflict`` is evaluated on the paths as written, out-of-bounds cells and
  illegal moves included.

The per-path work runs in C (``map``, ``min``, set operations) so a path of a
hundred thousand cells costs milliseconds, and a typical two-agent answer scores in
tens of microseconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from itertools import repeat
from operator import add, and_, contains, eq, gt, itemgetter, sub
from typing import Any

from envengineer.api import Validator, Verdict
from envengineer.tasks.mapf_frozenlake import TASK_NAME
from envengineer.tasks.mapf_frozenlake.answer import Cell, read_answer
from envengineer.tasks.mapf_frozenlake.instance import Instance, from_record

FAILURE_TYPES: tuple[str, ...] = (
    "parse",
    "agent_count",
    "start",
    "out_of_bounds",
    "illegal_move",
    "hole",
    "conflict",
    "goal",
)

#: Work budget (solver work units, the same on every machine) of certifying the optimum of a record
#: that comes without ``optimal_cost``: past it the response is judged valid or not, never optimal.
CERTIFY_WORK = 200_000

_PARSE_FAILURE = Verdict(valid=False, optimal=False, failure="parse", failed_checks=("parse",), cost=None)


class _Prepared:
    """What scoring needs from an instance, precomputed once."""

    __slots__ = ("size", "starts", "goals", "holes", "inside", "near", "optimal_cost", "agents", "numbers", "instance", "solved")

    def __init__(self, instance: Instance) -> None:
        n = instance.size
        self.size = n
        self.starts = tuple(a.start for a in instance.agents)
        self.goals = tuple(a.goal for a in instance.agents)
        self.holes = frozenset(instance.holes())
        self.inside = frozenset((r, c) for r in range(n) for c in range(n))
        # For each cell, the cells one step (or a wait) away, inside the grid or not.
        self.near = {
            (r, c): frozenset(((r, c), (r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1))) for r, c in self.inside
        }
        self.optimal_cost = instance.optimal_cost
        self.instance = instance
        self.solved = instance.optimal_cost is not None
        self.agents = range(1, instance.k + 1)
        self.numbers = tuple(self.agents)


@lru_cache(maxsize=4096)
def _prepare(instance: Instance) -> _Prepared:
    return _Prepared(instance)


def _illegal(path: tuple[Cell, ...], near: Mapping[Cell, frozenset[Cell]] | None) -> bool:
    """Whether some step moves a Manhattan distance above 1.

    ``near`` (cell -> cells within one step) serves paths that stay inside the grid;
    others, whose cells may hold any integers, are checked by arithmetic.
    """
    if near is not None:
        return not all(map(contains, map(near.__getitem__, path), path[1:]))
    rows = tuple(map(itemgetter(0), path))
    cols = tuple(map(itemgetter(1), path))
    steps = map(
        add,
        map(abs, map(sub, rows[1:], rows[:-1])),
        map(abs, map(sub, cols[1:], cols[:-1])),
    )
    return any(map(gt, steps, repeat(1)))


def _collide(p: tuple[Cell, ...], q: tuple[Cell, ...]) -> bool:
    """Vertex or edge conflict between two paths; an ended path stays on its last cell."""
    if len(p) > len(q):
        p, q = q, p
    m = len(p)
    if any(map(eq, p, q)):
        return True
    if m < len(q) and p[-1] in q[m:]:
        return True
    # A swap: p goes a -> b while q goes b -> a. (When p waits, a swap would already
    # be a vertex conflict, so no separate "p moved" test is needed.)
    return m > 1 and any(map(and_, map(eq, p[:-1], q[1:m]), map(eq, p[1:], q[: m - 1])))


def _arrival(path: Sequence[Cell], goal: Cell) -> int:
    t = len(path) - 1
    while t > 0 and path[t - 1] == goal:
        t -= 1
    return t


def solution_cost(paths: Sequence[Sequence[Cell]] | Mapping[int, Sequence[Cell]], goals: Sequence[Cell]) -> int:
    """Sum of arrival times: each agent's first t from which it stays on its goal.

    ``paths`` is a list aligned with ``goals`` or a mapping from agent number (1..k).
    Raises ``ValueError`` when the counts differ or a path does not end on its goal.
    """
    if isinstance(paths, Mapping):
        paths = [paths[i] for i in sorted(paths)]
    if len(paths) != len(goals):
        raise ValueError(f"{len(paths)} paths for {len(goals)} goals")
    total = 0
    for i, (path, goal) in enumerate(zip(paths, goals), start=1):
        path = [tuple(cell) for cell in path]
        goal = tuple(goal)
        if not path or path[-1] != goal:
            raise ValueError(f"agent {i}: path does not end on its goal {goal}")
        total += _arrival(path, goal)
    return total


def _score(prep: _Prepared, response: str) -> Verdict:
    parsed = read_answer(response, prep.agents)
    paths = parsed.paths
    if paths is None:
        return _PARSE_FAILURE
    numbers = prep.numbers
    failed: set[str] = set()
    if parsed.agent_numbers != numbers and sorted(parsed.agent_numbers) != list(numbers):
        failed.add("agent_count")
    present = [(paths[i], prep.starts[i - 1], prep.goals[i - 1]) for i in numbers if i in paths]
    holes = prep.holes
    for path, start, goal in present:
        if path[0] != start:
            failed.add("start")
        if path[-1] != goal:
            failed.add("goal")
        inside = prep.inside.issuperset(path)
        if not inside:
            failed.add("out_of_bounds")
        if len(path) > 1 and _illegal(path, prep.near if inside else None):
            failed.add("illegal_move")
        if holes and not holes.isdisjoint(path):
            failed.add("hole")
    if any(_collide(present[a][0], present[b][0]) for a in range(len(present)) for b in range(a)):
        failed.add("conflict")
    if failed:
        checks = tuple(name for name in FAILURE_TYPES if name in failed)
        return Verdict(valid=False, optimal=False, failure=checks[0], failed_checks=checks, cost=None)
    cost = sum(_arrival(path, goal) for path, _, goal in present)
    if not prep.solved:
        _certify(prep)
    optimal = prep.optimal_cost is not None and cost == prep.optimal_cost
    return Verdict(valid=True, optimal=optimal, failure=None, failed_checks=(), cost=cost)


def _certify(prep: _Prepared) -> None:
    """A record without ``optimal_cost`` (from another tool, say): solve it once, on demand, within
    :data:`CERTIFY_WORK` units of work (never a number of seconds: the verdict is the same everywhere)."""
    from envengineer.tasks.mapf_frozenlake.solver import solve

    prep.solved = True
    instance = prep.instance
    solution = solve(instance.grid, [(a.start, a.goal) for a in instance.agents], work_cap=CERTIFY_WORK)
    prep.optimal_cost = solution.cost if solution.status == "optimal" else None


def score_instance(instance: Instance, response: str) -> Verdict:
    """Judge one response to one instance. Never raises on any string; linear time."""
    return _score(_prepare(instance), response)


def _record_key(record: Mapping[str, Any]) -> Any:
    """A hashable key for everything in a record that scoring depends on, or None."""
    try:
        key = (
            record.get("id"),
            record["size"],
            tuple(record["grid"]),
            tuple((*a["start"], *a["goal"]) for a in record["agents"]),
            record.get("optimal_cost"),
        )
        hash(key)
    except Exception:  # malformed: let from_record say what is wrong
        return None
    return key


class MapfValidator(Validator):
    """Scores MAPF-FrozenLake responses: R_acc, optimality, and the failure type."""

    name = TASK_NAME
    description = "MAPF-FrozenLake: eight checks (parse … goal), sum-of-costs optimality"
    failure_types = FAILURE_TYPES
    cache_size = 65536

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self._cache: dict[Any, _Prepared] = {}

    def _prepared(self, record: Mapping[str, Any]) -> _Prepared:
        key = _record_key(record)
        prep = self._cache.get(key) if key is not None else None
        if prep is None:
            prep = _Prepared(from_record(record))
            if key is not None:
                if len(self._cache) >= self.cache_size:
                    del self._cache[next(iter(self._cache))]
                self._cache[key] = prep
        return prep

    def score(self, record: Mapping[str, Any], response: str) -> Verdict:
        """Judge one response. Raises ``ValueError`` only for a malformed record."""
        if isinstance(record, Instance):
            return score_instance(record, response)
        return _score(self._prepared(record), response)
