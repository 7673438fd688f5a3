"""The low level of the CBS: the single-agent space-time search.

One step of the search is a few big-int operations on cell bitsets, and the backward
pass yields the agent's multi-valued decision diagram (MDD) for free; among equally
short paths it takes the one with fewest conflicts with the other agents' paths.
"""

from __future__ import annotations

from .common import _INF
from .constraints import _Plan, _Table


class _LowLevel:
    """The low level of :class:`~.cbs._CBS` (its base class): paths for one agent under
    its constraints. Uses the attributes ``_CBS.__init__`` sets: ``G``, ``starts``,
    ``goals``, ``dists`` and ``tables`` (constraint tuple -> compiled ``_Table``)."""

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
