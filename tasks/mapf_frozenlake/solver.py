"""Optimal sum-of-costs solver for MAPF-FrozenLake (docs/mapf-frozenlake.md).

Pure Python, built for small grids. Cell sets are Python ints used as bitsets, so a
single-agent space-time search costs a few big-int operations per timestep and yields
the agent's multi-valued decision diagram (MDD) for free. Three parts:

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
"""

from __future__ import annotations

import gc
import heapq
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from itertools import combinations, permutations

Cell = tuple[int, int]

_INF = 1 << 30


@dataclass(frozen=True)
class Solution:
    status: str  # "optimal" | "unsolvable" | "gave_up"
    paths: tuple[tuple[Cell, ...], ...] | None  # per agent, t=0..arrival; None unless optimal
    cost: int | None  # sum of costs; None unless optimal
    lower_bound: int  # sum of individual shortest-path lengths, -1 if a goal is unreachable
    requires_wait: bool | None  # None unless optimal
    nodes: int  # high-level search nodes expanded
    reason: str = ""  # why unsolvable / gave up


class _GiveUp(Exception):
    pass


class _Unsolvable(Exception):
    pass


# --------------------------------------------------------------------------- grid


def _bits(mask: int):
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


class _Grid:
    """Free cells as a bitset; cell index is ``row * width + col``."""

    def __init__(self, grid: Sequence[str]):
        if not grid or not grid[0]:
            raise ValueError("grid: expected at least one non-empty row")
        self.h = len(grid)
        self.w = w = len(grid[0])
        free = not_first = not_last = 0
        for r, row in enumerate(grid):
            if not isinstance(row, str) or len(row) != w:
                raise ValueError(f"grid: row {r} is not a string of {w} cells")
            for c, ch in enumerate(row):
                bit = 1 << (r * w + c)
                if ch == "F":
                    free |= bit
                elif ch != "H":
                    raise ValueError(f"grid: cell ({r},{c}) is {ch!r}, expected 'F' or 'H'")
                if c:
                    not_first |= bit
                if c != w - 1:
                    not_last |= bit
        self.free = free
        self.not_first = not_first
        self.not_last = not_last
        n = self.h * w
        self.nbr = [0] * n  # free 4-neighbours of each free cell
        self.deg = [0] * n
        for i in _bits(free):
            m = self.expand(1 << i) & ~(1 << i)
            self.nbr[i] = m
            self.deg[i] = m.bit_count()
        self._comps: dict[int, list[int]] = {}

    def expand(self, s: int) -> int:
        """Cells reachable from ``s`` in one step (moves and waits)."""
        w = self.w
        return (s | ((s << 1) & self.not_first) | ((s >> 1) & self.not_last) | (s << w) | (s >> w)) & self.free

    def index(self, cell: Sequence[int], what: str) -> int:
        try:
            r, c = cell
        except (TypeError, ValueError):
            raise ValueError(f"{what}: expected (row, col), got {cell!r}") from None
        if not (0 <= r < self.h and 0 <= c < self.w):
            raise ValueError(f"{what}: {tuple(cell)} is outside the {self.h}x{self.w} grid")
        i = r * self.w + c
        if not (self.free >> i) & 1:
            raise ValueError(f"{what}: {tuple(cell)} is a hole")
        return i

    def cell(self, i: int) -> Cell:
        return divmod(i, self.w)

    def bfs(self, source: int) -> list[int]:
        dist = [_INF] * (self.h * self.w)
        frontier = seen = 1 << source
        d = 0
        while frontier:
            for i in _bits(frontier):
                dist[i] = d
            nxt = self.expand(frontier) & ~seen
            seen |= nxt
            frontier = nxt
            d += 1
        return dist

    def component(self, seed: int, within: int) -> int:
        comp = seed
        while True:
            nxt = self.expand(comp) & within
            if nxt == comp:
                return comp
            comp = nxt

    def comps_without(self, v: int) -> list[int]:
        """Connected components of the free cells minus cell ``v`` (cached)."""
        comps = self._comps.get(v)
        if comps is None:
            rest = self.free & ~(1 << v)
            comps = []
            while rest:
                comp = self.component(rest & -rest, rest)
                comps.append(comp)
                rest &= ~comp
            self._comps[v] = comps
        return comps


def distance_map(grid: Sequence[str], goal: Cell) -> dict[Cell, int]:
    """BFS distance to ``goal`` from every free cell that can reach it (others absent)."""
    g = _Grid(grid)
    dist = g.bfs(g.index(goal, "goal"))
    return {g.cell(i): d for i, d in enumerate(dist) if d < _INF}


# ---------------------------------------------------------------- constraints
#
# One agent's constraints are a tuple of tuples (a child node adds one):
#   (0, cell, t)          not on cell at time t
#   (1, u, v, t)          no move u -> v arriving at time t
#   (2, cell, t0, t1)     not on cell at any time in [t0, t1] (t1 may be _INF)
#   (3, t)                arrival time >= t
#   (4, t)                arrival time <= t
# An agent's arrival is the first time from which it stays on its goal, so a path of
# arrival T is on the goal at T and not at T - 1, and the goal must be free of bans
# from T on.


class _Table:
    """A constraint tuple compiled for the low-level search, built from the table of
    the tuple without its last constraint (cheap however deep the search goes)."""

    __slots__ = ("bans", "static", "ein", "eout", "lmin", "lmax", "horizon")

    def __init__(self):
        self.bans = [0]  # bans[t]: cells banned at time t, for t <= horizon
        self.static = 0  # cells banned at every time after the horizon
        self.ein: dict[int, dict[int, int]] = {}  # t -> {v: mask of u}: no u -> v at t
        self.eout: dict[int, dict[int, int]] = {}  # t -> {u: mask of v}
        self.lmin = 0
        self.lmax = _INF
        self.horizon = 0

    def extended(self, c: tuple) -> _Table:
        tb = _Table()
        bans = tb.bans = list(self.bans)
        tb.static = static = self.static
        tb.ein = self.ein
        tb.eout = self.eout
        tb.lmin = self.lmin
        tb.lmax = self.lmax
        horizon = self.horizon
        kind = c[0]
        if kind == 3:
            tb.lmin = max(self.lmin, c[1])
        elif kind == 4:
            tb.lmax = min(self.lmax, c[1])
        else:
            last = c[2] if kind == 2 and c[3] >= _INF else c[-1]
            if last > horizon:
                bans.extend([static] * (last - horizon))
                horizon = last
            if kind == 0:
                bans[c[2]] |= 1 << c[1]
            elif kind == 1:
                _, u, v, t = c
                ein = tb.ein = dict(self.ein)
                d = ein[t] = dict(ein.get(t, ()))
                d[v] = d.get(v, 0) | (1 << u)
                eout = tb.eout = dict(self.eout)
                d = eout[t] = dict(eout.get(t, ()))
                d[u] = d.get(u, 0) | (1 << v)
            else:
                _, x, t0, t1 = c
                bit = 1 << x
                if t1 >= _INF:
                    tb.static = static | bit
                    t1 = horizon
                for t in range(t0, t1 + 1):
                    bans[t] |= bit
        tb.horizon = horizon
        return tb

    def last_ban(self, cell: int) -> int:
        """Last time ``cell`` is banned (-1 if never, _INF if for ever)."""
        bit = 1 << cell
        if self.static & bit:
            return _INF
        bans = self.bans
        for t in range(self.horizon, -1, -1):
            if bans[t] & bit:
                return t
        return -1


class _Plan:
    """One agent's optimal path under its constraints, with its MDD (cells per time)
    and the set of cells it visits."""

    __slots__ = ("T", "path", "mdd", "cells")

    def __init__(self, T: int, path: list[int], mdd: list[int]):
        self.T = T
        self.path = path
        self.mdd = mdd
        cells = 0
        for c in path:
            cells |= 1 << c
        self.cells = cells


def _pair_conflicts(p: _Plan, q: _Plan) -> list[tuple[int, int, int]]:
    """(t, x, -1): both on x at t; (t, x, y): p moves x -> y while q moves y -> x."""
    if not p.cells & q.cells:
        return []
    p, q = p.path, q.path
    tp, tq = len(p) - 1, len(q) - 1
    out = []
    prev_a = prev_b = -1
    for t in range(max(tp, tq) + 1):
        a = p[t] if t <= tp else p[tp]
        b = q[t] if t <= tq else q[tq]
        if a == b:
            out.append((t, a, -1))
        elif a == prev_b and b == prev_a:
            out.append((t, prev_a, a))
        prev_a, prev_b = a, b
    return out


class _Node:
    __slots__ = ("cons", "plans", "g", "h", "conf", "nconf", "choice")

    def __init__(self, cons: list[tuple], plans: list[_Plan], conf: dict):
        self.cons = cons
        self.plans = plans
        self.g = sum(p.T for p in plans)
        self.h = 0
        self.conf = conf  # (i, j) with i < j -> conflicts of the pair
        self.nconf = sum(len(v) for v in conf.values())
        self.choice = None  # (cardinality, i, j, t, x, y) of the conflict to split on


_MVC_CACHE: dict[frozenset, int] = {}


def _min_vertex_cover(edges: list[tuple[int, int]]) -> int:
    if not edges:
        return 0
    key = frozenset(edges)
    hit = _MVC_CACHE.get(key)
    if hit is not None:
        return hit
    verts = sorted({v for e in edges for v in e})
    best = len(verts) - 1  # all but one vertex always covers
    for size in range(1, len(verts) - 1):
        if any(all(a in cover or b in cover for a, b in edges) for cover in map(set, combinations(verts, size))):
            best = size
            break
    if len(_MVC_CACHE) < 100_000:
        _MVC_CACHE[key] = best
    return best


# ------------------------------------------------------------------------- CBS


class _CBS:
    def __init__(
        self,
        grid: _Grid,
        starts: list[int],
        goals: list[int],
        dists: list[list[int]],
        deadline: float,
        *,
        parked: bool = False,
        bounds: list[tuple[tuple[int, ...], int]] | None = None,
        tables: dict | None = None,
    ):
        self.G = grid
        self.starts = starts
        self.goals = goals
        self.dists = dists
        self.k = len(starts)
        self.deadline = deadline
        self.tables: dict[tuple, _Table] = {} if tables is None else tables
        self.expanded = 0
        self.pair_hits: dict[tuple[int, int], int] = {}  # splits per pair, for the prover
        self.parked = parked  # corridor reasoning for goals inside corridors
        # lower bounds on the summed arrivals of groups of agents, and the pairs of
        # disjoint groups (whose bounds add up)
        self.bounds = bounds or []
        self.disjoint = [
            (u, v)
            for u, v in combinations(range(len(self.bounds)), 2)
            if not set(self.bounds[u][0]) & set(self.bounds[v][0])
        ]
        self.heap: list = []  # the open list, for a caller that wants its lowest f

    # ------------------------------------------------------------ low level

    def table(self, cons: tuple) -> _Table:
        tb = self.tables.get(cons)
        if tb is None:
            tb = self.table(cons[:-1]).extended(cons[-1]) if cons else _Table()
            self.tables[cons] = tb
        return tb

    def plan(self, a: int, cons: tuple, occ=None) -> _Plan | None:
        """Minimum-arrival path for agent ``a`` under ``cons``; None if there is none.

        ``occ()`` gives the cells the other agents occupy at each time (the last entry
        holds for ever); among the optimal paths the one with fewest vertex conflicts
        with them is taken.
        """
        tb = self.table(cons)
        s, g = self.starts[a], self.goals[a]
        gb = 1 << g
        last = tb.last_ban(g)
        if last >= _INF:
            return None
        tmin = self.dists[a][s]
        if tb.lmin > tmin:
            tmin = tb.lmin
        if last >= tmin:
            tmin = last + 1
        lmax = tb.lmax
        if tmin > lmax:
            return None
        G = self.G
        nbr = G.nbr
        nbr_g = nbr[g]
        ein = tb.ein
        horizon = tb.horizon
        bans = tb.bans
        static = tb.static
        free, nf, nl, w = G.free, G.not_first, G.not_last, G.w
        sb = 1 << s
        if bans[0] & sb:
            return None
        # forward: F[t] = cells the agent can be on at time t
        F = [sb]
        cur = sb
        t = 0
        while True:
            if t >= tmin:
                if t == 0:
                    if s == g:
                        break
                elif cur & gb:
                    pm = nbr_g & F[t - 1]
                    eb = ein.get(t)
                    if eb and g in eb:
                        pm &= ~eb[g]
                    if pm:
                        break
                if t > horizon and cur == F[t - 1]:
                    return None  # nothing changes any more: the goal stays out of reach
            if t >= lmax:
                return None
            t += 1
            nxt = (cur | ((cur << 1) & nf) | ((cur >> 1) & nl) | (cur << w) | (cur >> w)) & free
            nxt &= ~(bans[t] if t <= horizon else static)
            eb = ein.get(t)
            if eb:
                for v, pm in eb.items():
                    if (nxt >> v) & 1 and not ((nbr[v] | (1 << v)) & ~pm & cur):
                        nxt &= ~(1 << v)
            F.append(nxt)
            cur = nxt
        T = t
        # backward: the MDD, the cells on some optimal path at each time
        mdd = [0] * (T + 1)
        mdd[T] = gb
        if T > 0:
            eout = tb.eout
            m = F[T - 1] & nbr_g
            eb = ein.get(T)
            if eb and g in eb:
                m &= ~eb[g]
            mdd[T - 1] = m
            for t in range(T - 1, 0, -1):
                nxt = m
                m = F[t - 1] & (nxt | ((nxt << 1) & nf) | ((nxt >> 1) & nl) | (nxt << w) | (nxt >> w))
                eo = eout.get(t)
                if eo:
                    for u, sm in eo.items():
                        if (m >> u) & 1 and not ((nbr[u] | (1 << u)) & nxt & ~sm):
                            m &= ~(1 << u)
                mdd[t - 1] = m
        for m in mdd:
            if m & (m - 1):
                break
        else:  # a single optimal path
            return _Plan(T, [m.bit_length() - 1 for m in mdd], mdd)
        return _Plan(T, self.extract(mdd, ein, g, occ() if occ is not None else None), mdd)

    def extract(self, mdd: list[int], ein: dict, g: int, occ: list[int] | None) -> list[int]:
        """A path through the MDD with fewest vertex conflicts against ``occ``
        (counted up to two), lowest cell index first among equals."""
        T = len(mdd) - 1
        G = self.G
        nbr = G.nbr
        nf, nl, w = G.not_first, G.not_last, G.w
        r0 = r1 = mdd  # cells reachable with no / at most one conflict so far
        if occ is not None and T > 0:
            last = len(occ) - 1
            o = occ[: T + 1] if last >= T else occ + [occ[last]] * (T - last)
            r0 = [0] * (T + 1)
            x = r0[0] = mdd[0] & ~o[0]
            for t in range(1, T + 1):
                x = r0[t] = (x | ((x << 1) & nf) | ((x >> 1) & nl) | (x << w) | (x >> w)) & mdd[t] & ~o[t]
            if not (x >> g) & 1:
                r1 = [0] * (T + 1)
                y = r1[0] = mdd[0]
                for t in range(1, T + 1):
                    m = mdd[t]
                    x = r0[t - 1]
                    e0 = (x | ((x << 1) & nf) | ((x >> 1) & nl) | (x << w) | (x >> w)) & m
                    e1 = (y | ((y << 1) & nf) | ((y >> 1) & nl) | (y << w) | (y >> w)) & m
                    y = r1[t] = (e1 & ~o[t]) | (e0 & o[t])
        path = [0] * (T + 1)
        cur = g
        path[T] = g
        for t in range(T, 0, -1):
            preds = mdd[t - 1] & (nbr[cur] | (1 << cur))
            eb = ein.get(t)
            if eb and cur in eb:
                preds &= ~eb[cur]
            cand = preds & r0[t - 1] or preds & r1[t - 1] or preds
            cur = (cand & -cand).bit_length() - 1
            path[t - 1] = cur
        return path

    def occupancy(self, plans: list[_Plan], skip: int) -> list[int]:
        horizon = max(p.T for p in plans)
        occ = [0] * (horizon + 1)
        for j, p in enumerate(plans):
            if j == skip:
                continue
            T = p.T
            path = p.path
            for t in range(T + 1):
                occ[t] |= 1 << path[t]
            bit = 1 << path[T]
            for t in range(T + 1, horizon + 1):
                occ[t] |= bit
        return occ

    def earliest(self, a: int, cons: tuple, cell: int, entry: int) -> int:
        """Lower bound on the first time agent ``a`` stands on ``cell`` having come
        from a cell in ``entry`` (a mask); _INF if never."""
        tb = self.table(cons)
        G = self.G
        nbr = G.nbr
        ein = tb.ein
        cb = 1 << cell
        cur = 1 << self.starts[a]
        if tb.bans[0] & cur:
            return _INF
        if cur & cb:
            return 0
        t = 0
        while True:
            t += 1
            prev = cur
            cur = G.expand(prev) & ~(tb.bans[t] if t <= tb.horizon else tb.static)
            eb = ein.get(t)
            if eb:
                for v, pm in eb.items():
                    if (cur >> v) & 1 and not ((nbr[v] | (1 << v)) & ~pm & prev):
                        cur &= ~(1 << v)
            if cur & cb and prev & entry & ~(eb.get(cell, 0) if eb else 0):
                return t
            if t > tb.horizon and cur == prev:
                return _INF

    # ------------------------------------------------------------ conflicts

    def classify(self, node: _Node) -> None:
        """Pick the conflict to split on (cardinal first, then earliest); raise h to
        the minimum vertex cover of the cardinal-conflict graph."""
        plans = node.plans
        goals = self.goals
        best_key = None
        best = None
        card = []
        for (i, j), lst in node.conf.items():
            pi, pj = plans[i], plans[j]
            mi, mj = pi.mdd, pj.mdd
            pair_card = False
            for t, x, y in lst:
                if y >= 0:
                    ci = mi[t - 1] == 1 << x and mi[t] == 1 << y
                    cj = mj[t - 1] == 1 << y and mj[t] == 1 << x
                elif x == goals[i] and t >= pi.T:
                    # i sits on its goal: only arriving later avoids it
                    ci, cj = True, not self.avoids(pj, x, pi.T)
                elif x == goals[j] and t >= pj.T:
                    ci, cj = not self.avoids(pi, x, pj.T), True
                else:
                    ci = mi[t] == 1 << x
                    cj = mj[t] == 1 << x
                prio = ci + cj
                if prio == 2:
                    pair_card = True
                key = (-prio, t, i, j)
                if best_key is None or key < best_key:
                    best_key = key
                    best = (prio, i, j, t, x, y)
            if pair_card:
                card.append((i, j))
        node.choice = best
        h = _min_vertex_cover(card)
        if self.bounds:
            ex = [max(0, c - sum(plans[a].T for a in grp)) for grp, c in self.bounds]
            hb = max(ex)
            for u, v in self.disjoint:
                if ex[u] + ex[v] > hb:
                    hb = ex[u] + ex[v]
            if hb > h:
                h = hb
        if h > node.h:
            node.h = h

    def avoids(self, p: _Plan, x: int, t0: int) -> bool:
        """Has the MDD of plan ``p`` a path that is never on ``x`` from time ``t0`` on?"""
        mdd = p.mdd
        T = p.T
        if t0 > T:
            return mdd[T] != 1 << x
        expand = self.G.expand
        keep = ~(1 << x)
        r = mdd[t0] & keep
        for t in range(t0 + 1, T + 1):
            if not r:
                return False
            r = expand(r) & mdd[t] & keep
        return bool(r)

    # ------------------------------------------------------------ children

    def child(self, node: _Node, changes: list[tuple[int, tuple]]) -> _Node | None:
        """The child with constraints added (``changes`` lists (agent, constraint));
        None if an agent can no longer reach its goal."""
        cons = list(node.cons)
        plans = list(node.plans)
        touched = []
        for a, c in changes:
            cons[a] = cons[a] + (c,)
            if self.violates(plans[a], c):
                touched.append(a)
        for a in touched:
            p = self.plan(a, cons[a], lambda: self.occupancy(plans, a))
            if p is None:
                return None
            plans[a] = p
        conf = dict(node.conf)
        for a in touched:
            for b in range(self.k):
                if b == a:
                    continue
                key = (a, b) if a < b else (b, a)
                lst = _pair_conflicts(plans[key[0]], plans[key[1]])
                if lst:
                    conf[key] = lst
                else:
                    conf.pop(key, None)
        ch = _Node(cons, plans, conf)
        ch.h = max(0, node.g + node.h - ch.g)  # path-max
        return ch

    @staticmethod
    def violates(p: _Plan, c: tuple) -> bool:
        path, T = p.path, p.T
        kind = c[0]
        if kind == 0:
            _, x, t = c
            return (path[t] if t <= T else path[T]) == x
        if kind == 1:
            _, u, v, t = c
            return t <= T and path[t - 1] == u and path[t] == v
        if kind == 2:
            _, x, t0, t1 = c
            if t0 > T:
                return path[T] == x
            return x in path[t0 : min(t1, T) + 1] or (t1 > T and path[T] == x)
        if kind == 3:
            return T < c[1]
        return T > c[1]

    def branches(self, node: _Node) -> list[list[tuple[int, tuple]]]:
        """The constraints of the two children that resolve the chosen conflict."""
        _, i, j, t, x, y = node.choice
        if y < 0:
            for fin in (i, j):
                if x == self.goals[fin] and t >= node.plans[fin].T:
                    # target conflict: fin sits on its goal x. Either it arrives after t,
                    # or by t, and then nobody else may be on x from t on.
                    ban_all = [(m, (2, x, t, _INF)) for m in range(self.k) if m != fin]
                    return [[(fin, (3, t + 1))], [(fin, (4, t))] + ban_all]
        if self.parked:
            br = self.corridor_goal(node, i, j, t, x, y)
            if br:
                return br
        if y < 0:
            return self.corridor(node, i, j, t, x, y) or [[(i, (0, x, t))], [(j, (0, x, t))]]
        return self.corridor(node, i, j, t, x, y) or [[(i, (1, x, y, t))], [(j, (1, y, x, t))]]

    def find_corridor(self, x: int, y: int) -> tuple[int, list[int]] | None:
        """The one-cell-wide corridor through ``x`` (or ``y``): its inner cells (degree
        2) as a mask and its two end cells; None if there is none."""
        G = self.G
        deg = G.deg
        nbr = G.nbr
        if deg[x] == 2:
            seed = x
        elif y >= 0 and deg[y] == 2:
            seed = y
        else:
            return None
        ends = []
        inner = 1 << seed
        for first in _bits(nbr[seed]):
            prev, cur = seed, first
            while deg[cur] == 2 and not (inner >> cur) & 1:
                inner |= 1 << cur
                prev, cur = cur, (nbr[cur] & ~(1 << prev)).bit_length() - 1
            ends.append(cur)
        if len(ends) != 2 or ends[0] == ends[1] or (inner >> ends[0]) & 1 or (inner >> ends[1]) & 1:
            return None
        return inner, ends

    def inside_at(self, path: list[int], T: int, t: int, inner: int) -> int:
        """The time around ``t`` from which to look for the path's corridor crossing:
        ``t`` itself, or with the second phase's reasoning a neighbouring time step
        when the meeting is on a corridor's end cell."""
        u = min(t, T)
        if self.parked and not (inner >> path[u]) & 1:
            for v in (u - 1, u + 1):
                if 0 <= v <= T and (inner >> path[v]) & 1:
                    return v
        return u

    def corridor_goal(self, node: _Node, i: int, j: int, t: int, x: int, y: int):
        """Corridor reasoning when one agent's goal lies inside the corridor.

        Agent a crosses the corridor from end ``src`` to end ``dst`` (starting outside
        it and not on ``dst``); agent b (starting outside) parks for ever on its goal
        g inside, d cells from ``dst``. If a stands on ``dst`` by ta_out - 1 (ta_out: a
        lower bound on a's first arrival there from outside the corridor), it came
        through the corridor and passed g, so b either reached g from the ``src``
        side (at tb_src or later), or entered by ``dst`` after a left it, arriving at
        ta_in + 1 + d or later (ta_in: a's earliest arrival on ``dst`` from inside):
        two agents cannot pass each other in the corridor, and b cannot sit on g
        while a passes. So every solution has a off ``dst`` during [0, ta_out - 1] or
        b arriving at min(tb_src, ta_in + 1 + d) or later.
        """
        found = self.find_corridor(x, y)
        if found is None:
            return None
        inner, ends = found
        nbr = self.G.nbr
        plans = node.plans
        for a, b in ((i, j), (j, i)):
            gb = self.goals[b]
            if not (inner >> gb) & 1 or (inner >> self.starts[b]) & 1 or (inner >> self.starts[a]) & 1:
                continue
            pa = plans[a]
            path, T = pa.path, pa.T
            a0 = b0 = self.inside_at(path, T, t, inner)
            while a0 > 0 and (inner >> path[a0]) & 1:
                a0 -= 1
            while b0 < T and (inner >> path[b0]) & 1:
                b0 += 1
            src, dst = path[a0], path[b0]
            if src == dst or src not in ends or dst not in ends or self.starts[a] == dst:
                continue
            cells = [src]
            prev, cur = src, (nbr[src] & inner).bit_length() - 1
            while cur != dst:
                cells.append(cur)
                prev, cur = cur, (nbr[cur] & ~(1 << prev)).bit_length() - 1
            cells.append(dst)
            m = cells.index(gb)
            d = len(cells) - 1 - m
            ca, cb = node.cons[a], node.cons[b]
            ta_in = self.earliest(a, ca, dst, 1 << cells[-2])
            if ta_in >= _INF:
                continue
            X = min(self.earliest(b, cb, gb, 1 << cells[m - 1]), ta_in + 1 + d)
            ta_out = self.earliest(a, ca, dst, nbr[dst] & ~inner)
            r = min(ta_out - 1, max(X, pa.T) + len(cells))
            c_a = (2, dst, 0, r)
            c_b = (3, X)
            if r < 0 or not (self.violates(pa, c_a) and self.violates(plans[b], c_b)):
                continue
            return [[(a, c_a)], [(b, c_b)]]
        return None

    def corridor(self, node: _Node, i: int, j: int, t: int, x: int, y: int):
        """Corridor reasoning for a head-on meeting inside a one-cell-wide corridor.

        Let the corridor be c_0 .. c_L (inner cells of degree 2), agent a cross it from
        c_0 to c_L and b from c_L to c_0, neither starting inside it or at its far end.
        Every solution has a off c_L during [0, min(ta' - 1, tb + L)] or b off c_0
        during [0, min(tb' - 1, ta + L)], with ta a lower bound on a's first time on
        c_L and ta' on its first arrival there from outside the corridor (tb, tb' the
        same for b). Otherwise both cross before those bounds; two agents cannot pass
        inside the corridor, so one crossing ends before the other begins, and the
        later one ends after the earlier one's first arrival + L: a contradiction.
        """
        G = self.G
        nbr = G.nbr
        found = self.find_corridor(x, y)
        if found is None:
            return None
        inner, ends = found
        L = inner.bit_count() + 1
        plans = node.plans
        dirs = []  # (entry, exit) of each agent's crossing around time t
        for ag in (i, j):
            p = plans[ag]
            path, T = p.path, p.T
            if (inner >> path[0]) & 1 or (inner >> path[T]) & 1:
                return None
            a0 = b0 = self.inside_at(path, T, t, inner)
            while a0 > 0 and (inner >> path[a0]) & 1:
                a0 -= 1
            while b0 < T and (inner >> path[b0]) & 1:
                b0 += 1
            src, dst = path[a0], path[b0]
            if src == dst or src not in ends or dst not in ends:
                return None
            dirs.append((src, dst))
        (si, di), (sj, dj) = dirs
        if si != dj or di != sj or self.starts[i] == di or self.starts[j] == dj:
            return None
        ci, cj = node.cons[i], node.cons[j]
        ta = self.earliest(i, ci, di, G.free)
        tb = self.earliest(j, cj, dj, G.free)
        if ta >= _INF or tb >= _INF:
            return None
        ri = min(self.earliest(i, ci, di, nbr[di] & ~inner) - 1, tb + L)
        rj = min(self.earliest(j, cj, dj, nbr[dj] & ~inner) - 1, ta + L)
        if ri < 0 or rj < 0:
            return None
        ci_new = (2, di, 0, ri)
        cj_new = (2, dj, 0, rj)
        if not (self.violates(plans[i], ci_new) and self.violates(plans[j], cj_new)):
            return None
        return [[(i, ci_new)], [(j, cj_new)]]

    # ------------------------------------------------------------ search

    def root(self) -> _Node | None:
        plans: list[_Plan] = []
        for a in range(self.k):
            p = self.plan(a, (), (lambda: self.occupancy(plans, -1)) if plans else None)
            if p is None:
                return None
            plans.append(p)
        conf = {}
        for a, b in combinations(range(self.k), 2):
            lst = _pair_conflicts(plans[a], plans[b])
            if lst:
                conf[(a, b)] = lst
        return _Node([()] * self.k, plans, conf)

    def run(self, on_expand) -> Generator[None, None, _Node | None]:
        """Best-first CBS, yielding after every expansion; returns the goal node, or
        None when every branch is infeasible (then there is no solution)."""
        root = self.root()
        if root is None:
            return None
        self.classify(root)
        heap = self.heap = [(root.g + root.h, root.nconf, 0, root)]
        counter = 1
        while heap:
            node = heapq.heappop(heap)[-1]
            if node.nconf == 0:
                return node
            if time.perf_counter() > self.deadline:
                raise _GiveUp(f"time limit reached after {self.expanded} nodes")
            self.expanded += 1
            on_expand(self.expanded)
            for ch in self.expand(node):
                heapq.heappush(heap, (ch.g + ch.h, ch.nconf, counter, ch))
                counter += 1
            yield
        return None

    def expand(self, node: _Node) -> list[_Node]:
        while True:
            _, i, j, *_ = node.choice
            self.pair_hits[(i, j)] = self.pair_hits.get((i, j), 0) + 1
            kids = []
            for br in self.branches(node):
                ch = self.child(node, br)
                if ch is None:
                    continue
                if ch.g == node.g and ch.nconf < node.nconf:
                    # bypass: adopt the child's paths (valid here too), keep the MDDs
                    node.plans = [
                        q if q is p else _Plan(q.T, q.path, p.mdd) for p, q in zip(node.plans, ch.plans)
                    ]
                    node.conf = ch.conf
                    node.nconf = ch.nconf
                    kids = None
                    break
                self.classify(ch)
                kids.append(ch)
            if kids is not None:
                return kids
            if node.nconf == 0:
                return [node]
            self.classify(node)


# ------------------------------------------------------------------ joint search


def _pair_table(G: _Grid, area: int, gi: int, gj: int) -> tuple[list[int], list[int], list[int]]:
    """Exact optimal cost-to-go of agents i and j alone on the map: V[a * n + b] with
    i on a and j on b (both unfinished), and each one's distance to its goal while the
    other sits on its own goal for ever."""
    n = G.h * G.w
    nbr = G.nbr
    i_alone = _distances(G, gi, area & ~(1 << gj))  # j finished on gj
    j_alone = _distances(G, gj, area & ~(1 << gi))
    V = [_INF] * (n * n)
    heap = []
    for b in _bits(area & ~(1 << gi)):  # i may finish where it stands
        if j_alone[b] < _INF:
            V[gi * n + b] = j_alone[b]
    for a in _bits(area & ~(1 << gj)):
        v = i_alone[a]
        if v < V[a * n + gj]:
            V[a * n + gj] = v
    heap = [(v, x) for x, v in enumerate(V) if v < _INF]
    heapq.heapify(heap)
    moves = {c: [c] + list(_bits(nbr[c])) for c in _bits(area)}
    while heap:  # the joint move graph is undirected: search back from the finishes
        v, x = heapq.heappop(heap)
        if v > V[x]:
            continue
        a, b = divmod(x, n)
        nv = v + 2
        for a2 in moves[a]:
            base = a2 * n
            for b2 in moves[b]:
                if a2 != b2 and not (a2 == b and b2 == a) and nv < V[base + b2]:
                    V[base + b2] = nv
                    heapq.heappush(heap, (nv, base + b2))
    return V, i_alone, j_alone


def _distances(G: _Grid, source: int, within: int) -> list[int]:
    dist = [_INF] * (G.h * G.w)
    frontier = seen = (1 << source) & within
    d = 0
    while frontier:
        for i in _bits(frontier):
            dist[i] = d
        nxt = G.expand(frontier) & within & ~seen
        seen |= nxt
        frontier = nxt
        d += 1
    return dist


def _best_matching(edges: list[tuple[int, int, int]]) -> int:
    """Maximum total weight of disjoint edges (few edges, few agents)."""
    if not edges:
        return 0
    (i, j, e), rest = edges[0], edges[1:]
    return max(e + _best_matching([x for x in rest if x[0] not in (i, j) and x[1] not in (i, j)]), _best_matching(rest))


def _joint_search(
    G: _Grid, starts: list[int], goals: list[int], dists: list[list[int]], max_states: int
) -> Generator[None, None, list[list[int]] | None | bool]:
    """Optimal joint A* over all agents, yielding every 128 expansions.

    Operator decomposition: one agent moves per step, in a fixed order. An agent
    finishes by entering its goal (for the last time); finished agents stay put and
    cost nothing, so the cost of a step is paid by the agent that moves. The
    heuristic adds to the agents' distances the largest sum of pairwise extra costs
    over disjoint pairs, from exact two-agent tables (charged at the start of each
    time step, then drawn down). Returns the paths, None if no solution exists
    (search exhausted), or False if more than ``max_states`` states were needed.
    """
    m = len(starts)
    nbr = G.nbr
    n = G.h * G.w
    full = (1 << m) - 1
    starts_t = tuple(starts)
    moves: dict[int, list[int]] = {}
    area = 0
    for s in starts:
        area |= G.component(1 << s, G.free)
    tables = [
        (i, j) + _pair_table(G, area, goals[i], goals[j]) for i, j in combinations(range(m), 2)
    ] if m >= 2 else []

    def term(i: int, p: int) -> int:  # admissible cost-to-go of unfinished agent i at p
        return 2 if p == goals[i] else dists[i][p]

    def pairwise(pos, done) -> int:
        total = 0
        edges = []
        for i, j, V, i_alone, j_alone in tables:
            pi, pj = pos[i], pos[j]
            if not (done >> i) & 1:
                di = dists[i][pi]
                if not (done >> j) & 1:
                    e = V[pi * n + pj] - di - dists[j][pj]
                else:
                    e = i_alone[pi] - di
            elif not (done >> j) & 1:
                e = j_alone[pj] - dists[j][pj]
            else:
                continue
            if e > 0:
                edges.append((i, j, e))
        for i in range(m):
            if not (done >> i) & 1:
                total += dists[i][pos[i]]
        return total + _best_matching(edges)

    h0 = sum(term(i, starts[i]) for i in range(m))
    init = [0]
    for i in range(m):  # an agent standing on its goal may finish at once
        if starts[i] == goals[i]:
            init += [d | (1 << i) for d in init]
    heap = []
    best: dict = {}
    counter = 0
    for d0 in init:
        hs = h0 - sum(term(i, starts[i]) for i in range(m) if (d0 >> i) & 1)
        hr = max(hs, pairwise(starts_t, d0))
        j = 0
        while j < m and (d0 >> j) & 1:
            j += 1
        node = (j, starts_t, starts_t, d0, 0, hs, hr, 0, 0, None)
        best[(j, starts_t, (), d0)] = 0
        heap.append((hr, 0, counter, node))
        counter += 1
    heapq.heapify(heap)
    pops = 0
    while heap:
        node = heapq.heappop(heap)[-1]
        j, pos, prev, done, g, hs, hr, gr, t, parent = node
        if done == full:
            return _joint_paths(m, node)
        if best.get((j, pos, prev[:j], done), _INF) < g:
            continue
        pops += 1
        if not pops & 127:
            if len(best) > max_states:
                return False
            yield
        p = prev[j]
        opts = moves.get(p)
        if opts is None:
            opts = moves[p] = [p] + list(_bits(nbr[p]))
        gj = goals[j]
        hj = term(j, p)
        for q in opts:
            clash = False
            for i in range(m):
                if i != j and (i < j or (done >> i) & 1):
                    pi = pos[i]
                    if pi == q or (q != p and q == prev[i] and pi == p):
                        clash = True
                        break
            if clash:
                continue
            npos = pos[:j] + (q,) + pos[j + 1 :]
            ng = g + 1
            for nd in (done, done | (1 << j)) if q == gj and q != p else (done,):
                nhs = hs - hj + (0 if nd != done else term(j, q))
                nj, nt, nprev = j + 1, t, prev
                while nj < m and (nd >> nj) & 1:
                    nj += 1
                if nj == m and nd != full:  # round complete: next time step
                    nt, nj, nprev = t + 1, 0, npos
                    while (nd >> nj) & 1:
                        nj += 1
                key = (nj, npos, nprev[:nj], nd)
                if best.get(key, _INF) <= ng:
                    continue
                best[key] = ng
                if nj == 0 or nt != t:  # a new time step: recharge the pairwise bound
                    nhr, ngr = max(nhs, pairwise(npos, nd)), ng
                    nh = nhr
                else:
                    nhr, ngr = hr, gr
                    nh = max(nhs, hr - (ng - gr))
                child = (nj, npos, nprev, nd, ng, nhs, nhr, ngr, nt, (node, q, j, t))
                heapq.heappush(heap, (ng + nh, -ng, counter, child))
                counter += 1
    return None


def _joint_paths(m: int, node) -> list[list[int]]:
    """Per-agent paths (to arrival) from the chain of joint-search nodes."""
    steps = []  # (t, agent, cell, finished) of every move
    cur = node
    while cur[-1] is not None:
        parent, q, j, t = cur[-1]
        steps.append((t, j, q, bool((cur[3] >> j) & 1) and not (parent[3] >> j) & 1))
        cur = parent
    paths = [[p] for p in cur[1]]
    arrival = [0 if (cur[3] >> i) & 1 else -1 for i in range(m)]
    for t, j, q, finished in reversed(steps):
        path = paths[j]
        while len(path) <= t:
            path.append(path[-1])
        path.append(q)
        if finished:
            arrival[j] = t + 1
    return [path[: arrival[i] + 1] for i, path in enumerate(paths)]


# ---------------------------------------------------------------------- proofs


def _pair_solvable(G: _Grid, s1: int, g1: int, s2: int, g2: int) -> bool:
    """Can two agents, alone on the map, both reach their goals?

    For two agents simultaneous moves can always be serialised, so this explores the
    configurations reachable by moving one agent at a time: for each cell p of agent 1,
    the set of cells agent 2 can be on, closed under agent 2's moves (a union of
    components of the map minus p).
    """

    def close(p: int, mask: int) -> int:
        out = 0
        for comp in G.comps_without(p):
            if comp & mask:
                out |= comp
        return out

    goal2 = 1 << g2
    reach = {s1: close(s1, 1 << s2)}
    if s1 == g1 and reach[s1] & goal2:
        return True
    stack = [s1]
    nbr = G.nbr
    while stack:
        p = stack.pop()
        m = reach[p]
        for q in _bits(nbr[p]):
            nm = m & ~(1 << q)
            old = reach.get(q, 0)
            if not (nm & ~old):
                continue
            nm = old | close(q, nm)
            if nm != old:
                reach[q] = nm
                if q == g1 and nm & goal2:
                    return True
                stack.append(q)
    return False


def _group_solvable(G: _Grid, starts: Sequence[int], goals: Sequence[int], limit: int) -> bool | None:
    """Can these agents, alone on the map, all reach their goals? None if undecided
    within ``limit`` configurations.

    A simultaneous step decomposes into single moves and rotations of agents around a
    cycle; on a grid the shortest cycle is a 2x2 block and any longer one needs six or
    more agents, so for up to five agents single moves plus 2x2 rotations reach
    exactly the configurations the contract allows. Both are reversible: this is a
    bidirectional search for start and goal in one component.
    """
    k = len(starts)
    if k > 5:
        return None
    start, goal = tuple(starts), tuple(goals)
    if start == goal:
        return True
    nbr = G.nbr
    w = G.w
    free = G.free
    tl = 0  # top-left cells of 2x2 blocks of free cells
    for i in _bits(free):
        if i % w != w - 1 and (free >> (i + 1)) & 1 and (free >> (i + w)) & 1 and (free >> (i + w + 1)) & 1:
            tl |= 1 << i

    def neighbours(c):
        occ = 0
        for p in c:
            occ |= 1 << p
        for i, p in enumerate(c):
            for q in _bits(nbr[p] & ~occ):
                yield c[:i] + (q,) + c[i + 1 :]
        if k >= 4:
            for p in c:
                if (tl >> p) & 1:
                    blk = (p, p + 1, p + w + 1, p + w)
                    if (occ >> blk[1]) & 1 and (occ >> blk[2]) & 1 and (occ >> blk[3]) & 1:
                        where = {q: i for i, q in enumerate(c)}
                        for shift in (1, 3):
                            n = list(c)
                            for idx, b in enumerate(blk):
                                n[where[b]] = blk[(idx + shift) % 4]
                            yield tuple(n)

    seen = [{start}, {goal}]
    frontier = [[start], [goal]]
    total = 2
    while frontier[0] and frontier[1]:
        side = 0 if len(frontier[0]) <= len(frontier[1]) else 1
        mine, other = seen[side], seen[1 - side]
        nxt = []
        for c in frontier[side]:
            for n in neighbours(c):
                if n in mine:
                    continue
                if n in other:
                    return True
                mine.add(n)
                nxt.append(n)
        total += len(nxt)
        if total > limit:
            return None
        frontier[side] = nxt
    return False


#: Configurations of _group_solvable worth one CBS expansion (about 0.25 ms here, at
#: roughly 150,000 configurations a second): the exchange rate of the prover's budget.
_CONFIGS_PER_NODE = 40


class _Prover:
    """Called after each CBS expansion; when the search runs long, tries to prove the
    instance unsolvable through a pair or a small group of its agents.

    Pairs are decided exactly and cheaply, once. Groups of three to five are settled
    as solvable when prioritised planning finds them a plan; otherwise an exact
    configuration search decides them within a limit that grows on each retry, the
    whole costing at most a fixed share of the CBS work done so far.
    """

    share = 0.2

    def __init__(self, G: _Grid, cbs: _CBS):
        self.G = G
        self.cbs = cbs
        self.starts = cbs.starts
        self.goals = cbs.goals
        self.k = cbs.k
        self.next_pairs = 16 if self.k == 2 else 32
        self.next_groups = 64
        self.settled: set[tuple[int, ...]] = set()
        self.tried: dict[tuple[int, ...], int] = {}  # group -> largest limit searched
        self.spent = 0  # configurations searched by group proofs

    def __call__(self, n: int) -> None:
        if n >= self.next_pairs:
            self.next_pairs = _INF
            hits = self.cbs.pair_hits
            s, g = self.starts, self.goals
            for a, b in sorted(combinations(range(self.k), 2), key=lambda p: (-hits.get(p, 0), p)):
                if not _pair_solvable(self.G, s[a], g[a], s[b], g[b]):
                    raise _Unsolvable(f"agents {a + 1} and {b + 1} cannot both reach their goals")
        if self.k >= 3 and n >= self.next_groups:
            self.next_groups *= 2
            self.check_groups()

    def check_groups(self) -> None:
        # Budgeted in configurations against the CBS work done so far (not seconds), so
        # the search takes the same path, and gives the same verdict, on any machine.
        budget = self.cbs.expanded * _CONFIGS_PER_NODE * self.share - self.spent
        if budget <= 0:
            return
        hits = self.cbs.pair_hits

        def weight(grp):
            return -sum(hits.get(p, 0) for p in combinations(grp, 2))

        groups = [
            grp
            for size in range(3, min(self.k, 5) + 1)
            for grp in combinations(range(self.k), size)
            if grp not in self.settled
        ]
        groups.sort(key=lambda grp: (self.tried.get(grp, 0), weight(grp), grp))
        for grp in groups:
            if grp not in self.tried:
                self.tried[grp] = 0
                if self.prioritised(grp):
                    self.settled.add(grp)
                    continue
            limit = max(1000, 4 * self.tried[grp])
            if limit > budget:
                break
            self.tried[grp] = limit
            res = _group_solvable(self.G, [self.starts[a] for a in grp], [self.goals[a] for a in grp], limit)
            budget -= limit
            self.spent += limit
            if res is False:
                names = ", ".join(str(a + 1) for a in grp)
                raise _Unsolvable(f"agents {names} cannot all reach their goals")
            if res:
                self.settled.add(grp)

    def prioritised(self, grp: tuple[int, ...]) -> bool:
        """Does planning the agents one after another (in a few orders, each avoiding
        the paths before it) give the group a valid joint plan?"""
        cbs = self.cbs
        if len(grp) <= 3:
            orders = list(permutations(grp))
        else:
            orders = [grp[i:] + grp[:i] for i in range(len(grp))]
            orders += [o[::-1] for o in orders]
        for order in orders:
            cons: list[tuple] = []
            for a in order:
                p = cbs.plan(a, tuple(cons), None)
                if p is None:
                    break
                path, T = p.path, p.T
                cons.append((0, path[0], 0))
                for t in range(1, T + 1):
                    cons.append((0, path[t], t))
                    if path[t] != path[t - 1]:
                        cons.append((1, path[t], path[t - 1], t))
                cons.append((2, path[T], T, _INF))
            else:
                return True
        return False


# ---------------------------------------------------------------------- entry

# The joint search runs where the number of joint positions stays below _JOINT_MAX,
# with more turns the smaller that number is. Turns are counted in work units, not
# seconds, so that results (paths included) do not depend on the machine: a CBS
# expansion is one unit, 128 joint-search expansions about four.
_JOINT_MAX = 3_000_000
_JOINT_UNIT = 4
_JOINT_STATES = 1_000_000  # memory cap of the joint search (states kept)
_HEAD_START = 32  # units of CBS before the joint search gets its turns
_SLICE = 16  # units per turn
# Without a work limit (a time limit only), instances with three or more agents that
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
    time_limit: float = 10.0,
    work_limit: int | None = None,
) -> Solution:
    """Optimal sum-of-costs solution of a MAPF-FrozenLake instance.

    ``agents`` are (start, goal) pairs. Raises ``ValueError`` on a malformed grid or a
    start/goal off the map or on a hole; everything else is a verdict.
    """
    # The searches allocate many small acyclic objects; the cyclic garbage collector
    # would repeatedly walk them for nothing (it costs up to half the time).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _solve(grid, agents, time_limit, work_limit)
    finally:
        if enabled:
            gc.enable()


def _solve(grid: Sequence[str], agents: Sequence[tuple[Cell, Cell]], time_limit: float, work_limit: int | None) -> Solution:
    deadline = time.perf_counter() + time_limit
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
    try:
        which, result = _portfolio(runs, deadline, work_limit)
    except _Unsolvable as exc:
        return Solution("unsolvable", None, None, lb, None, _nodes(cbs, second), str(exc))
    except _GiveUp as exc:
        return Solution("gave_up", None, None, lb, None, _nodes(cbs, second), str(exc))
    if result is None:
        why = "joint search exhausted" if runs[which][1] == _JOINT_UNIT else "every branch of the search is infeasible"
        return Solution("unsolvable", None, None, lb, None, _nodes(cbs, second), why)
    raw = [p.path for p in result.plans] if isinstance(result, _Node) else result
    paths = tuple(tuple(G.cell(i) for i in p) for p in raw)
    cost = sum(len(p) - 1 for p in raw)
    return Solution("optimal", paths, cost, lb, cost > lb, _nodes(cbs, second))


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


# --------------------------------------------------------------------------- ICTS


class _ICTS:
    """Increasing cost tree search (Sharon et al.) for the tail that CBS leaves:
    per-agent cost vectors in order of their sum, each tested for a conflict-free
    set of paths of exactly those costs (shorter ones padded with waits on the goal).

    A cost c of agent i allows cell set ``ball(start, t) & ball(goal, c - t)`` at time
    t (its MDD, as bitsets). A vector is pruned when some smaller group of agents has
    no solution at its part of the vector; each group's verdicts are cached as an
    up-set (more cost never hurts: a padded path is still a path). Pairs and triples
    are decided by exact tables of their joint states that lie on some conflict-free
    solution (forward then backward, the last agent's cells a bitset); groups of four
    or more by a depth-first search over joint states that keeps every pair and
    triple of agents inside those tables (forward checking), with failed states
    memoised."""

    def __init__(self, G: _Grid, starts, goals, dists):
        self.G = G
        self.starts = list(starts)
        self.goals = list(goals)
        self.dists = dists
        self.nbr = [G.expand(1 << c) if (G.free >> c) & 1 else 0 for c in range(G.h * G.w)]
        self.balls_s = [[1 << s] for s in starts]
        self.balls_g = [[1 << g] for g in goals]
        self.pairs: dict = {}
        self.triples: dict = {}
        self.verdicts: dict = {}  # group -> (feasible vectors, infeasible vectors)

    def ball(self, balls: list[int], r: int) -> int:
        while len(balls) <= r:
            balls.append(self.G.expand(balls[-1]))
        return balls[r]

    def layers(self, i: int, c: int, T: int) -> list[int]:
        bs, bg, g = self.balls_s[i], self.balls_g[i], 1 << self.goals[i]
        return [self.ball(bs, t) & self.ball(bg, c - t) if t < c else g for t in range(T + 1)]

    def pair(self, i: int, ci: int, j: int, cj: int):
        """Per time step, {cell of i: bitset of cells of j} over the joint states on
        some conflict-free pair of paths of costs (ci, cj); None if there is none."""
        key = (i, ci, j, cj)
        tab = self.pairs.get(key, 0)
        if tab != 0:
            return tab
        nbr, expand = self.nbr, self.G.expand
        T = max(ci, cj)
        Li, Lj = self.layers(i, ci, T), self.layers(j, cj, T)
        F = [{self.starts[i]: 1 << self.starts[j]}]
        for t in range(1, T + 1):
            Ni, Nj, new = Li[t], Lj[t], {}
            for pi, Sj in F[-1].items():
                for qi in _bits(nbr[pi] & Ni):
                    qb = 1 << qi
                    if Sj & qb:  # j may not step from qi onto pi (a swap)
                        s = expand(Sj & ~qb) | (nbr[qi] & ~(1 << pi))
                    else:
                        s = expand(Sj)
                    s &= Nj & ~qb
                    if s:
                        new[qi] = new.get(qi, 0) | s
            if not new:
                self.pairs[key] = None
                return None
            F.append(new)
        B = F
        for t in range(T - 1, -1, -1):
            nxt, cur = B[t + 1], {}
            for pi, Sj in F[t].items():
                pib, acc = 1 << pi, 0
                for qi in _bits(nbr[pi]):
                    Bq = nxt.get(qi)
                    if Bq is not None:
                        acc |= expand(Bq & ~pib)
                        if Bq & pib:
                            acc |= nbr[pi] & ~(1 << qi)
                acc &= Sj
                if acc:
                    cur[pi] = acc
            B[t] = cur
        self.pairs[key] = B
        return B

    def triple(self, a: int, ca: int, b: int, cb: int, c: int, cc: int):
        """As ``pair`` for three agents: {(cell of a, cell of b): bitset of c}."""
        key = (a, ca, b, cb, c, cc)
        tab = self.triples.get(key, 0)
        if tab != 0:
            return tab
        nbr, expand = self.nbr, self.G.expand
        T = max(ca, cb, cc)
        Pab, Pac, Pbc = self.pair(a, ca, b, cb), self.pair(a, ca, c, cc), self.pair(b, cb, c, cc)
        if Pab is None or Pac is None or Pbc is None:
            self.triples[key] = None
            return None
        Pab, Pac, Pbc = _padded(Pab, T), _padded(Pac, T), _padded(Pbc, T)
        F = [{(self.starts[a], self.starts[b]): 1 << self.starts[c]}]
        for t in range(1, T + 1):
            ab, ac, bc, new = Pab[t], Pac[t], Pbc[t], {}
            for (pa, pb), Sc in F[-1].items():
                pab, pbb = 1 << pa, 1 << pb
                for qa in _bits(nbr[pa]):
                    Sb = ab.get(qa)
                    if Sb is None:
                        continue
                    Sca, qab = ac.get(qa, 0), 1 << qa
                    for qb in _bits(nbr[pb] & Sb):
                        if qb == pa and qa == pb:
                            continue
                        qbb = 1 << qb
                        s = expand(Sc & ~(qab | qbb))
                        if Sc & qab:
                            s |= nbr[qa] & ~pab
                        if Sc & qbb:
                            s |= nbr[qb] & ~pbb
                        s &= Sca & bc.get(qb, 0) & ~(qab | qbb)
                        if s:
                            new[qa, qb] = new.get((qa, qb), 0) | s
            if not new:
                self.triples[key] = None
                return None
            F.append(new)
        B = F
        for t in range(T - 1, -1, -1):
            nxt, cur = B[t + 1], {}
            for (pa, pb), Sc in F[t].items():
                pab, pbb, acc = 1 << pa, 1 << pb, 0
                for qa in _bits(nbr[pa]):
                    for qb in _bits(nbr[pb]):
                        Bq = nxt.get((qa, qb))
                        if Bq is None or (qb == pa and qa == pb):
                            continue
                        acc |= expand(Bq & ~(pab | pbb))
                        if Bq & pab:
                            acc |= nbr[pa] & ~(1 << qa)
                        if Bq & pbb:
                            acc |= nbr[pb] & ~(1 << qb)
                acc &= Sc
                if acc:
                    cur[pa, pb] = acc
            B[t] = cur
        self.triples[key] = B
        return B

    def search(self, agents: tuple[int, ...], cs: tuple[int, ...]):
        """Joint positions at t = 0..T of a conflict-free solution of the group at
        costs ``cs`` (None if there is none); yields every few joint states."""
        m, T = len(agents), max(cs)
        start = tuple(self.starts[a] for a in agents)
        if T == 0:  # everyone on their goal already
            return [start]
        P, TT = {}, {}
        for y, x in combinations(range(m), 2):
            tab = self.pair(agents[y], cs[y], agents[x], cs[x])
            yield
            if tab is None:
                return None
            P[y, x] = _padded(tab, T)
        for y, z, x in combinations(range(m), 3):
            tab = self.triple(agents[y], cs[y], agents[z], cs[z], agents[x], cs[x])
            for _ in range(4):
                yield
            if tab is None:
                return None
            TT[y, z, x] = _padded(tab, T)
        nbr = self.nbr
        Pt = [{yx: v[t] for yx, v in P.items()} for t in range(T + 1)]
        Tt = [{k3: v[t] for k3, v in TT.items()} for t in range(T + 1)]
        dom = []  # cells each agent may hold at each time (projections of the pair tables)
        for t in range(T + 1):
            row = [0] * m
            for key in Pt[t][0, 1]:
                row[0] |= 1 << key
            for x in range(1, m):
                for s in Pt[t][0, x].values():
                    row[x] |= s
            dom.append(row)

        def children(t1: int, pos: tuple):
            """Joint moves from ``pos`` (time t1 - 1) into states allowed at t1."""
            old = {p: x for x, p in enumerate(pos)}
            new = [0] * m
            pt, tt = Pt[t1], Tt[t1]

            def assign(x: int, cands: list[int]):
                p = pos[x]
                for q in _bits(cands[x]):
                    y = old.get(q)
                    if y is not None and y < x and new[y] == p:
                        continue  # a swap with y
                    new[x] = q
                    if x == m - 1:
                        yield tuple(new)
                        continue
                    nb, nc = ~(1 << q), list(cands)
                    for z in range(x + 1, m):
                        s = cands[z] & nb & pt[x, z].get(q, 0)
                        for y in range(x):
                            s &= tt[y, x, z].get((new[y], q), 0)
                        if not s:
                            break
                        nc[z] = s
                    else:
                        yield from assign(x + 1, nc)

            row = dom[t1]
            return assign(0, [nbr[pos[x]] & row[x] for x in range(m)])

        stack = [(start, children(1, start))]
        failed: set = set()
        n = 0
        while stack:
            t1 = len(stack)
            pos, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                failed.add((t1 - 1, pos))
                stack.pop()
                continue
            if t1 == T:
                return [s for s, _ in stack] + [nxt]
            if (t1, nxt) in failed:
                continue
            stack.append((nxt, children(t1 + 1, nxt)))
            n += 1
            if n & 15 == 0:
                yield
        return None

    def feasible(self, agents: tuple[int, ...], cs: tuple[int, ...]):
        """Whether the group has a solution at costs ``cs`` (cached as an up-set)."""
        good, bad = self.verdicts.setdefault(agents, ([], []))
        for v in good:
            if all(a <= b for a, b in zip(v, cs)):
                return True
        for v in bad:
            if all(a >= b for a, b in zip(v, cs)):
                return False
        if len(agents) == 2:
            ok = self.pair(agents[0], cs[0], agents[1], cs[1]) is not None
            yield
        elif len(agents) == 3:
            ok = self.triple(agents[0], cs[0], agents[1], cs[1], agents[2], cs[2]) is not None
            for _ in range(4):
                yield
        else:
            ok = (yield from self.search(agents, cs)) is not None
        (good if ok else bad).append(cs)
        return ok

    def run(self):
        """Optimal per-agent paths (cell indices); runs for ever on an unsolvable
        instance (the other searches prove those). The full searches of one total
        cost run in turns (any vector that succeeds is optimal, and a feasible one
        usually succeeds within a few states while infeasible ones must exhaust)."""
        k = len(self.starts)
        d = [self.dists[i][self.starts[i]] for i in range(k)]
        groups = [g for r in range(2, k) for g in combinations(range(k), r)]
        everyone = tuple(range(k))
        extra = 0
        while True:
            pool: list = []
            for cs in _vectors(d, extra):
                for g in groups:
                    if not (yield from self.feasible(g, tuple(cs[a] for a in g))):
                        break
                else:
                    pool.append(self.search(everyone, cs))
                yield
                states = yield from self.turns(pool, 1)
                if states is not None:
                    return self.paths(states)
            while pool:
                states = yield from self.turns(pool, 1)
                if states is not None:
                    return self.paths(states)
            extra += 1

    @staticmethod
    def turns(pool: list, rounds: int):
        """Advance every search in ``pool`` by ``rounds`` of its steps; drop those
        that fail; the states of the first that succeeds."""
        for gen in list(pool):
            try:
                for _ in range(rounds):
                    next(gen)
                    yield
            except StopIteration as done:
                if done.value is not None:
                    return done.value
                pool.remove(gen)
        return None

    def paths(self, states: list[tuple]) -> list[list[int]]:
        paths = []
        for i in range(len(self.starts)):
            p = [s[i] for s in states]
            while len(p) > 1 and p[-1] == p[-2]:  # trailing waits on the goal cost nothing
                p.pop()
            paths.append(p)
        return paths


def _padded(tab: list, T: int) -> list:
    """A pair/triple table extended to T steps (everyone stays on their goals)."""
    return tab + [tab[-1]] * (T + 1 - len(tab))


def _vectors(d: list[int], extra: int):
    """Cost vectors ``d + e`` with e >= 0 summing to ``extra``, lexicographic in e."""
    k = len(d)
    e = [0] * k

    def rec(x: int, rem: int):
        if x == k - 1:
            e[x] = rem
            yield tuple(a + b for a, b in zip(d, e))
            return
        for v in range(rem + 1):
            e[x] = v
            yield from rec(x + 1, rem - v)

    return rec(0, extra)


def _portfolio(runs: list[list], deadline: float, work_limit: int | None = None):
    """Run the searches in turns, each getting work in proportion to its weight;
    return (index, result) of the first to finish. A search that runs out of room
    (returns False) leaves the others to it. ``work_limit`` caps the units of work
    done in all (a give-up that does not depend on the machine's speed)."""
    done_units = 0
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
        except StopIteration as done:
            if done.value is False:
                run[0] = None
                continue
            return runs.index(run), done.value
        if work_limit is not None and done_units > work_limit:
            raise _GiveUp(f"work limit of {work_limit} units reached")
        if time.perf_counter() > deadline:
            raise _GiveUp("time limit reached")
