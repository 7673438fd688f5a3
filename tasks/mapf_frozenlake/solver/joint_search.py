"""The joint A* over all agents' positions (operator decomposition, heuristic from
exact two-agent cost tables), run alongside CBS in alternating turns when the joint
state space is small. Crowded small maps and agents that must reorder themselves in a
dead end defeat CBS but not this."""

from __future__ import annotations

import heapq
from collections.abc import Generator
from itertools import combinations

from .common import _INF
from .grid import _bits, _Grid


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
