"""The ICTS fallback (no work limit, three or more agents, past the generator's work
budget) against the brute force, and on the 10x10 instance it exists for."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from test_mapf_solver import brute_force_cost, check_and_cost, individual_lengths, random_instance, tiny_instances

from envengineer.tasks.mapf_frozenlake import solver as solver_module
from envengineer.tasks.mapf_frozenlake.solver import solve

UNDECIDED = "undecided"


def _icts(grid, agents, steps=200_000):
    """The ICTS alone: per-agent paths, or UNDECIDED after ``steps`` turns (it runs
    for ever on an unsolvable instance; the other searches prove those)."""
    G = solver_module._Grid(grid)
    starts = [G.index(s, "start") for s, _ in agents]
    goals = [G.index(g, "goal") for _, g in agents]
    run = solver_module._ICTS(G, starts, goals, [G.bfs(g) for g in goals]).run()
    try:
        for _ in range(steps):
            next(run)
    except StopIteration as done:
        return [[G.cell(i) for i in p] for p in done.value]
    return UNDECIDED


def assert_icts_matches_brute_force(grid, agents) -> bool:
    if len(agents) < 2:  # the ICTS is for groups
        return False
    if len({s for s, _ in agents}) < len(agents) or len({g for _, g in agents}) < len(agents):
        return False
    if individual_lengths(grid, agents) < 0:
        return False
    expected = brute_force_cost(grid, agents)
    if expected is None:  # the ICTS never proves unsolvability (the other searches do)
        return False
    paths = _icts(grid, agents)
    assert paths != UNDECIDED
    assert check_and_cost(grid, agents, paths) == expected
    for (_, goal), path in zip(agents, paths):
        assert len(path) == 1 or path[-2] != goal, "paths carry no trailing waits"
    return True


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_instances(sizes=(3, 4), max_agents=3))
def test_icts_matches_brute_force(inst):
    assert_icts_matches_brute_force(*inst)


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
@pytest.mark.parametrize("seed", range(2))
def test_icts_matches_brute_force_four_agents(seed):
    # crowded small maps, where the groups of two to three agents prune most vectors
    rng = random.Random(seed)
    decided = 0
    for _ in range(10):
        grid, agents = random_instance(rng, rng.choice([3, 4]), 0.15, 4)
        decided += assert_icts_matches_brute_force(grid, agents)
    assert decided >= 3


CORRIDOR_MAPS = [
    ["FFFFF", "HHFHH", "HHFHH", "FFFFF"],
    ["FFHFF", "FFHFF", "FFFFF", "HHFHH", "FFFFF"],
    ["FFFFF", "HFHHF", "HFFFF", "HHHFH"],
]


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
@pytest.mark.parametrize("grid", CORRIDOR_MAPS)
def test_icts_on_corridor_maps_matches_brute_force(grid):
    rng = random.Random(len(grid[0]) * 7 + len(grid))
    free = [(r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch == "F"]
    decided = 0
    for _ in range(12):
        agents = list(zip(rng.sample(free, 3), rng.sample(free, 3)))
        if any(s == g for s, g in agents):
            continue
        decided += assert_icts_matches_brute_force(grid, agents)
    assert decided >= 3


# The draw that defeated both CBSs within 10 s (bench seed 3): optimum 86, 17 above the
# sum of the agents' distances. The ICTS alone settles it in about 2.5 s on a quiet
# core; run to completion (no clock), so a loaded machine only makes it slower.
HARD = (
    ["FFHFFFFFFF", "FFFFFFFFFF", "FFFHFFFFFF", "FHHFFFFFFF", "FFHHFFFFHF",
     "HFFHHHFFFF", "FHFFHFFFFF", "FFFFFHHFFH", "FFHFFFHFFF", "FFFFFFHFFH"],
    [((9, 0), (6, 5)), ((2, 1), (7, 0)), ((5, 8), (3, 0)), ((2, 9), (2, 1)), ((2, 6), (4, 1))],
)


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_icts_settles_the_hard_draw():
    grid, agents = HARD
    paths = _icts(grid, agents, steps=10**9)
    assert paths != UNDECIDED
    assert check_and_cost(grid, agents, paths) == 86


def test_icts_takes_over_after_its_head_start(monkeypatch):
    # with no head start the ICTS races both CBSs from the first unit; same verdicts
    rng = random.Random(8)
    cases = [random_instance(rng, rng.choice([4, 5, 6]), 0.2, rng.choice([3, 4])) for _ in range(25)]
    before = [solve(grid, agents, time_limit=20) for grid, agents in cases]
    monkeypatch.setattr(solver_module, "_SECOND_AFTER", 0)
    for (grid, agents), old in zip(cases, before):
        sol = solve(grid, agents, time_limit=20)
        assert (sol.status, sol.cost) == (old.status, old.cost)
        if sol.status == "optimal":
            assert check_and_cost(grid, agents, sol.paths) == sol.cost
