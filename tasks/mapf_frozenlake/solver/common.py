"""Names every part of the solver shares: the cell type, the distance that stands for
"unreachable", and the two exceptions a search raises to stop the whole solve (it gave
up; it proved the instance unsolvable)."""

from __future__ import annotations

Cell = tuple[int, int]

_INF = 1 << 30


class _GiveUp(Exception):
    pass


class _Unsolvable(Exception):
    pass
