"""Optimal sum-of-costs solver for MAPF-FrozenLake (docs/mapf-frozenlake.md).

Pure Python, built for small grids. Cell sets are Python ints used as bitsets, so a
single-agent space-time search costs a few big-int operations per timestep and yields
the agent's multi-valued decision diagram (MDD) for free. Four parts:

* Conflict-based search (CBS) with the ICBS/CBSH enhancements: conflicts prioritised
  by cardinality (read off the MDDs), bypassing, the CG heuristic (minimum vertex
  cover of the cardinal-conflict graph), target reasoning with length constraints
  for "an agent stays on its goal for ever", and corridor reasoning with range
  constraints for head-on meetings in one-cell-wide corridors. Among equally short
  paths the low level takes the one with fewest conflicts, so most instances are
  settled at the root.
* A joint A* over all agents' positions (operator decomposition, heuristic from
  exact two-agent cost tables), run alongside CBS in alternating turns when the
  joint state space is small. Crowded small maps and agents that must reorder
  themselves in a dead end defeat CBS but not this.
* Without a work limit, a second CBS for the rare instance of three or more agents
  that the first has not settled within the generator's work budget, run in turns
  with it: it first bounds the optimal cost of every smaller group of agents (each
  group by a CBS of its own) and adds the bounds to its heuristic, and it has
  corridor reasoning for a goal inside a corridor that another agent must cross.
  The same fallback runs an increasing cost tree search (ICTS) with 16 turns to each
  CBS's one: per-agent cost vectors in order of their sum, each pruned when a group of
  two to k - 1 agents has no conflict-free solution at its part of the vector, the full
  searches of one total run in turns. Whatever the first CBS settles within that budget
  comes out exactly as before.
* Proofs of unsolvability rather than time-outs: an unreachable goal is seen up
  front; when the search runs long, every pair of agents and then groups of three to
  five are tested for joint solvability by exact reachability searches over their
  configurations (the instance is unsolvable if any subset is); an exhausted search
  is a proof too.

Layout: one module per part; this one holds the public API (``solve``,
``shortest_paths_suffice``, ``distance_map``, ``Solution``) with the entry: how the
searches share the work (the portfolio), and the second CBS with its group bounds.

* ``grid.py``: the map as a bitset, BFS distances, connected components.
* ``constraints.py``: constraint tables, plans and their MDDs, conflicts, CBS nodes.
* ``low_level.py``: the single-agent space-time search (the CBS's low level).
* ``cbs.py``: the CBS's high level (conflict choice, bypass, target and corridor
  reasoning, best-first search).
* ``joint_search.py``: the joint A*.
* ``proofs.py``: the unsolvability proofs and the prover that runs them.
* ``icts.py``: the ICTS.
* ``common.py``: what they share (the cell type, ``_INF``, the exceptions that stop a
  solve).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from .cbs import _CBS
from .common import _INF, Cell, _GiveUp, _Unsolvable
from .constraints import _Node
from .grid import _Grid, distance_map
from .icts import _ICTS
from .joint_search import _joint_search
from .proofs import _Prover

__all__ = ["Cell", "Solution", "distance_map", "shortest_paths_suffice", "solve"]

# _solve looks up _second_search, _ICTS and _SECOND_AFTER in this module (tests patch
# them here).


@dataclass(frozen=True)
class Solution:
    status: str  # "optimal" | "unsolvable" | "gave_up"
    paths: tuple[tuple[Cell, ...], ...] | None  # per agent, t=0..arrival; None unless optimal
    cost: int | None  # sum of costs; None unless optimal
    lower_bound: int  # sum of individual shortest-path lengths, -1 if a goal is unreachable
    requires_wait: bool | None  # None unless optimal
    nodes: int  # high-level search nodes expanded
    reason: str = ""  # why unsolvable / gave up
    work: int = 0  # units of search work done (the unit of work_limit and work_cap; the same on every machine)


# The joint search runs where the number of joint positions stays below _JOINT_MAX,
# with more turns the smaller that number is. Turns are counted in work units, not
# seconds, so that results (paths included) do not depend on the machine: a CBS
# expansion is one unit, 128 joint-search expansions about four.
_JOINT_MAX = 3_000_000
_JOINT_UNIT = 4
_JOINT_STATES = 1_000_000  # memory cap of the joint search (states kept)
_HEAD_START = 32  # units of CBS before the joint search gets its turns
_SLICE = 16  # units per turn
# Without a work limit (a work cap, a time limit or no limit at all), instances with three or more agents that
# the CBS has not settled within the generator's work budget get a second CBS, run in
# turns with the first: whatever the first settles within that budget comes out
# exactly as before (paths included).
_SECOND_AFTER = 40_000
_ICTS_WEIGHT = 16.0  # the ICTS's share of the turns against each CBS once it starts
_GROUP_NODES = 5000  # expansions per group bound before it settles for the lowest open f


def solve(
    grid: Sequence[str],
    agents: Sequence[tuple[Cell, Cell]],
    *,
    time_limit: float | None = None,
    work_limit: int | None = None,
    work_cap: int | None = None,
) -> Solution:
    """Optimal sum-of-costs solution of a MAPF-FrozenLake instance.

    ``agents`` are (start, goal) pairs. Raises ``ValueError`` on a malformed grid or a
    start/goal off the map or on a hole; everything else is a verdict.

    Budgets: ``work_limit`` gives up after that many units of work (``Solution.work``) with the
    first CBS and the joint search only (the generator's budget: what they settle within it is
    settled exactly so without a limit too); ``work_cap`` gives up after that many units with
    every search on (the fallbacks of three or more agents included). Both are work, so a
    give-up is the same on every machine. ``time_limit`` (seconds, default none) is a wall-clock
    give-up whose verdict depends on the machine's speed: for interactive use, never for data.
    """
    # The searches allocate many small acyclic objects; the cyclic garbage collector
    # would repeatedly walk them for nothing (it costs up to half the time).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _solve(grid, agents, time_limit, work_limit, work_cap)
    finally:
        if enabled:
            gc.enable()


def _solve(grid: Sequence[str], agents: Sequence[tuple[Cell, Cell]], time_limit: float | None, work_limit: int | None,
           work_cap: int | None = None) -> Solution:
    for name, value in (("work_limit", work_limit), ("work_cap", work_cap)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name}: a positive whole number of work units or None, got {value!r}")
    deadline = float("inf") if time_limit is None else time.perf_counter() + time_limit
    G = _Grid(grid)
    starts = [G.index(s, f"agents[{i}].start") for i, (s, _) in enumerate(agents)]
    goals = [G.index(g, f"agents[{i}].goal") for i, (_, g) in enumerate(agents)]
    k = len(starts)
    if k == 0:
        return Solution("optimal", (), 0, 0, False, 0)
    dists = [G.bfs(g) for g in goals]
    for i in range(k):
        if dists[i][starts[i]] >= _INF:
            return Solution("unsolvable", None, None, -1, None, 0, f"agent {i + 1} cannot reach its goal")
    lb = sum(dists[i][starts[i]] for i in range(k))
    if len(set(starts)) < k:
        return Solution("unsolvable", None, None, lb, None, 0, "two agents share a start cell")
    if len(set(goals)) < k:
        return Solution("unsolvable", None, None, lb, None, 0, "two agents share a goal cell")

    cbs = _CBS(G, starts, goals, dists, deadline)
    runs = [[cbs.run(_Prover(G, cbs)), 1, 1.0, 0.0]]  # generator, unit, weight, units spent
    second: list[_CBS] = []
    if work_limit is None and k >= 3:
        # the second CBS gets turns only once the first has done _SECOND_AFTER units
        strong = _second_search(G, starts, goals, dists, deadline, cbs.tables, second)
        runs.append([strong, 1, 1.0, float(_SECOND_AFTER)])
        icts = _ICTS(G, starts, goals, dists).run()
        runs.append([icts, 1, _ICTS_WEIGHT, _SECOND_AFTER * _ICTS_WEIGHT])
    area = 0
    for s in starts:
        area |= G.component(1 << s, G.free)
    size = 1
    for n in range(k):
        size *= area.bit_count() - n
    if size <= _JOINT_MAX:
        weight = 4.0 if size <= 50_000 else 2.0 if size <= 500_000 else 1.0
        joint = _joint_search(G, starts, goals, dists, _JOINT_STATES)
        runs.append([joint, _JOINT_UNIT, weight, _HEAD_START * weight])
    limit = min((w for w in (work_limit, work_cap) if w is not None), default=None)
    spent = [0]
    try:
        which, result = _portfolio(runs, deadline, limit, spent)
    except _Unsolvable as exc:
        return Solution("unsolvable", None, None, lb, None, _nodes(cbs, second), str(exc), spent[0])
    except _GiveUp as exc:
        return Solution("gave_up", None, None, lb, None, _nodes(cbs, second), str(exc), spent[0])
    if result is None:
        why = "joint search exhausted" if runs[which][1] == _JOINT_UNIT else "every branch of the search is infeasible"
        return Solution("unsolvable", None, None, lb, None, _nodes(cbs, second), why, spent[0])
    raw = [p.path for p in result.plans] if isinstance(result, _Node) else result
    paths = tuple(tuple(G.cell(i) for i in p) for p in raw)
    cost = sum(len(p) - 1 for p in raw)
    return Solution("optimal", paths, cost, lb, cost > lb, _nodes(cbs, second), "", spent[0])


def shortest_paths_suffice(
    grid: Sequence[str], agents: Sequence[tuple[Cell, Cell]], *, work_limit: int = 100_000
) -> tuple[bool | None, int | None]:
    """Whether every agent can follow one of its shortest paths without a conflict.

    Returns (verdict, sum of the individual shortest path lengths). True means the optimal
    sum of costs equals that sum (``requires_wait`` is false); False means it does not, or
    the instance is unsolvable; None means undecided within ``work_limit`` search steps (a
    deterministic budget), and then only :func:`solve` can tell. One exact test of the ICTS
    at its root cost vector: far cheaper than certifying the optimum when the answer is no.
    """
    G = _Grid(grid)
    starts = [G.index(s, f"agents[{i}].start") for i, (s, _) in enumerate(agents)]
    goals = [G.index(g, f"agents[{i}].goal") for i, (_, g) in enumerate(agents)]
    k = len(starts)
    dists = [G.bfs(g) for g in goals]
    lengths = [dists[i][starts[i]] for i in range(k)]
    if any(d >= _INF for d in lengths) or len(set(starts)) < k or len(set(goals)) < k:
        return False, None
    total = sum(lengths)
    if k < 2:
        return True, total
    check = _ICTS(G, starts, goals, dists).feasible(tuple(range(k)), tuple(lengths))
    steps = 0
    try:
        while True:
            next(check)
            steps += 1
            if steps > work_limit:
                return None, total
    except StopIteration as stop:
        return bool(stop.value), total


def _nodes(cbs: _CBS, second: list[_CBS]) -> int:
    return cbs.expanded + sum(c.expanded for c in second)


def _second_search(G: _Grid, starts, goals, dists, deadline: float, tables: dict, searches: list[_CBS]):
    """Bounds for every smaller group of agents, then a fresh CBS that uses them,
    with corridor reasoning for goals inside corridors and for meetings on a
    corridor's end cell."""
    bounds = yield from _group_bounds(G, starts, goals, dists, deadline, tables, searches)
    strong = _CBS(G, starts, goals, dists, deadline, parked=True, bounds=bounds, tables=tables)
    searches.append(strong)
    return (yield from strong.run(_Prover(G, strong)))


def _group_bounds(G: _Grid, starts, goals, dists, deadline: float, tables: dict, searches: list[_CBS]):
    """Lower bounds on the optimal cost of every group of two to k - 1 agents alone
    on the map, smallest groups first, each from a CBS that uses the bounds of its
    own subgroups (exact unless it runs past _GROUP_NODES expansions, then the lowest
    f left open). A group with no solution proves the instance unsolvable."""
    k = len(starts)
    bounds: list[tuple[tuple[int, ...], int]] = []
    for size in range(2, k):
        for grp in combinations(range(k), size):
            members = set(grp)
            inner = [(tuple(grp.index(a) for a in sg), c) for sg, c in bounds if members.issuperset(sg)]
            sub = _CBS(
                G,
                [starts[a] for a in grp],
                [goals[a] for a in grp],
                [dists[a] for a in grp],
                deadline,
                parked=True,
                bounds=inner,
                tables=tables,
            )
            searches.append(sub)
            gen = sub.run(lambda n: None)
            c = None
            try:
                for _ in range(_GROUP_NODES):
                    next(gen)
                    yield
            except StopIteration as done:
                c = _INF if done.value is None else done.value.g
            if c is None:
                c = sub.heap[0][0] if sub.heap else _INF
            if c >= _INF:
                names = ", ".join(str(a + 1) for a in grp)
                raise _Unsolvable(f"agents {names} cannot all reach their goals")
            if c > sum(dists[a][starts[a]] for a in grp):
                bounds.append((grp, c))
    return bounds


def _portfolio(runs: list[list], deadline: float, work_limit: int | None = None, spent: list[int] | None = None):
    """Run the searches in turns, each getting work in proportion to its weight;
    return (index, result) of the first to finish. A search that runs out of room
    (returns False) leaves the others to it. ``work_limit`` caps the units of work
    done in all (a give-up that does not depend on the machine's speed); ``spent[0]``
    is kept at the units done."""
    done_units = 0
    spent = [0] if spent is None else spent
    while True:
        live = [r for r in runs if r[0] is not None]
        if not live:
            raise _GiveUp("no search could finish")
        run = min(live, key=lambda r: r[3] / r[2])
        gen, unit = run[0], run[1]
        try:
            for _ in range(0, _SLICE, unit):
                next(gen)
                run[3] += unit
                done_units += unit
                spent[0] = done_units
        except StopIteration as done:
            if done.value is False:
                run[0] = None
                continue
            return runs.index(run), done.value
        if work_limit is not None and done_units > work_limit:
            raise _GiveUp(f"work limit of {work_limit} units reached")
        if time.perf_counter() > deadline:
            raise _GiveUp("time limit reached")
