"""Proofs of unsolvability: exact reachability searches over the configurations of a
pair of agents, or of a group of three to five, alone on the map (the instance is
unsolvable if any subset is), and the prover that runs them when the CBS runs long."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations, permutations

from .cbs import _CBS
from .common import _INF, _Unsolvable
from .grid import _bits, _Grid


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
