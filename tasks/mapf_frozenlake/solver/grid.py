"""The map: free cells as a bitset (cell index ``row * width + col``), one-step
expansion, BFS distances, and the connected components that the proofs use."""

from __future__ import annotations

from collections.abc import Sequence

from .common import _INF, Cell


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
