"""Conflict-based search (CBS), the high level, with the ICBS/CBSH enhancements.

Conflicts are prioritised by cardinality (read off the MDDs); bypassing; the CG
heuristic (minimum vertex cover of the cardinal-conflict graph), raised by lower
bounds on groups of agents when the caller gives them; target reasoning with length
constraints for "an agent stays on its goal for ever"; corridor reasoning with range
constraints for head-on meetings in one-cell-wide corridors and, with ``parked``, for
a goal inside a corridor that another agent must cross. The low level (single-agent
search) is the base class, in ``low_level.py``.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Generator
from itertools import combinations

from .common import _INF, _GiveUp
from .constraints import _min_vertex_cover, _Node, _pair_conflicts, _Plan, _Table
from .grid import _bits, _Grid
from .low_level import _LowLevel


class _CBS(_LowLevel):
    """Best-first CBS over the agents (or a group of them): the high-level search; its
    low level, the single-agent search, is the base class."""

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
