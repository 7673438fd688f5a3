"""What a CBS node carries: each agent's constraints, compiled for the low-level search
(``_Table``); each agent's plan with its MDD (``_Plan``); the conflicts between two
plans; the high-level node; and the minimum vertex cover behind the CG heuristic."""

from __future__ import annotations

from itertools import combinations

from .common import _INF

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
