"""grid-walk: a start cell and k moves (U, D, L, R) on an N x N grid; the answer is the k cells visited.

The frontier testbed (docs/grid-walk.md). Its difficulty is the walk's length: the training groups are
``k3`` … ``k10`` (k moves each), one budget share and one grid size per group. A policy warm-started
on short walks (``warm_start_max_moves``, default 4, with a thin tail of longer ones: ``warm_start_long_share``,
default 5%) solves those and fails the long ones, so the
groups span "solved by the warm start" to "unsolvable by it" and the held-out target (``grid-walk-target``:
k = 9 and 10) lies beyond its reach. Moves never leave the grid (a move is drawn among those that stay
on it), so every instance has exactly one right answer.

Prompt styles:

- ``compact`` (the tiny policy's): ``G5 2_3 R U U L D =`` → ``2_4 1_4 0_4 0_3 1_3`` (cells ``row_col``,
  row 0 at the top; ``U`` is row − 1, ``R`` column + 1), read word by word (``tiny_vocabulary``);
- ``full`` (chat models): the same in words, the answer inside ``<answer></answer>``.

A response is valid when it lists exactly the k cells, in order; there is nothing to optimise, so a
valid answer is optimal. Failure types: ``parse`` (no cell list found), ``length`` (not k cells),
``wrong`` (k cells, one or more wrong). Everything is seeded by strings (``Random("grid-walk|…")``), so the
same config and seed give the same records on any machine.
"""

TASK_NAME = "grid-walk"
