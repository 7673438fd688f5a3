"""Increasing cost tree search (ICTS): run beside the second CBS for three or more agents
that the first has not settled, and the exact test behind ``shortest_paths_suffice``
(the ICTS at its root cost vector)."""

from __future__ import annotations

from itertools import combinations

from .grid import _bits, _Grid


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
