"""The MAPF-FrozenLake solver against an independent brute force and a plain checker.

The brute force is a joint-state Dijkstra written from the contract alone: every agent
is either still going (costs 1 per step) or has declared itself finished on its goal
(stays there for ever, costs nothing), so the cheapest way to finish everyone is the
optimal sum of costs.
"""

from __future__ import annotations

import heapq
import itertools
import random
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envengineer.tasks.mapf_frozenlake import solver as solver_module
from envengineer.tasks.mapf_frozenlake.solver import Solution, distance_map, solve
from envengineer.tasks.mapf_frozenlake.solver.proofs import _group_solvable, _pair_solvable

# ------------------------------------------------------------------ references


def brute_force_cost(grid, agents):
    """Optimal sum of costs by Dijkstra over (positions, finished flags); None if unsolvable."""
    n_rows, n_cols = len(grid), len(grid[0])
    free = {(r, c) for r in range(n_rows) for c in range(n_cols) if grid[r][c] == "F"}
    k = len(agents)
    starts = tuple(s for s, _ in agents)
    goals = tuple(g for _, g in agents)
    if len(set(starts)) < k or len(set(goals)) < k:
        return None

    def steps(p):
        r, c = p
        return [p] + [q for q in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)) if q in free]

    def finish_choices(pos, done):
        on_goal = [i for i in range(k) if not done[i] and pos[i] == goals[i]]
        for n in range(len(on_goal) + 1):
            for chosen in itertools.combinations(on_goal, n):
                yield tuple(done[i] or i in chosen for i in range(k))

    heap = [(0, starts, d) for d in finish_choices(starts, (False,) * k)]
    heapq.heapify(heap)
    settled = set()
    while heap:
        cost, pos, done = heapq.heappop(heap)
        if (pos, done) in settled:
            continue
        settled.add((pos, done))
        if all(done):
            return cost
        going = sum(not d for d in done)
        options = [[pos[i]] if done[i] else steps(pos[i]) for i in range(k)]
        for new in itertools.product(*options):
            if len(set(new)) < k:
                continue
            if any(
                new[i] == pos[j] and new[j] == pos[i] and new[i] != pos[i]
                for i in range(k)
                for j in range(i + 1, k)
            ):
                continue
            for d in finish_choices(new, done):
                if (new, d) not in settled:
                    heapq.heappush(heap, (cost + going, new, d))
    return None


def check_and_cost(grid, agents, paths):
    """Assert the contract's checks on ``paths``; return their sum of costs."""
    n_rows, n_cols = len(grid), len(grid[0])
    assert len(paths) == len(agents)
    for (start, goal), path in zip(agents, paths):
        assert path, "empty path"
        assert path[0] == start, "start"
        assert path[-1] == goal, "goal"
        for r, c in path:
            assert 0 <= r < n_rows and 0 <= c < n_cols, "out_of_bounds"
            assert grid[r][c] == "F", "hole"
        for a, b in zip(path, path[1:]):
            assert abs(a[0] - b[0]) + abs(a[1] - b[1]) <= 1, "illegal_move"

    def at(path, t):
        return path[min(t, len(path) - 1)]

    horizon = max(len(p) for p in paths)
    for t in range(horizon + 1):
        cells = [at(p, t) for p in paths]
        assert len(set(cells)) == len(cells), f"vertex conflict at t={t}"
        if t:
            for p, q in itertools.combinations(paths, 2):
                moved = at(p, t) != at(p, t - 1)
                assert not (moved and at(p, t) == at(q, t - 1) and at(q, t) == at(p, t - 1)), f"swap at t={t}"
    total = 0
    for (_, goal), path in zip(agents, paths):
        arrival = len(path) - 1
        while arrival > 0 and path[arrival - 1] == goal:
            arrival -= 1
        total += arrival
    return total


def individual_lengths(grid, agents):
    total = 0
    for start, goal in agents:
        d = distance_map(grid, goal).get(start)
        if d is None:
            return -1
        total += d
    return total


def assert_consistent(grid, agents, sol: Solution):
    assert sol.lower_bound == individual_lengths(grid, agents)
    if sol.status == "optimal":
        assert sol.cost == check_and_cost(grid, agents, sol.paths)
        assert sol.cost >= sol.lower_bound
        assert sol.requires_wait == (sol.cost > sol.lower_bound)
        for (_, goal), path in zip(agents, sol.paths):
            assert len(path) == 1 or path[-2] != goal, "paths carry no trailing waits"
    else:
        assert sol.paths is None and sol.cost is None and sol.requires_wait is None
        assert sol.reason


# ------------------------------------------------------------------ instances


@st.composite
def tiny_instances(draw, sizes=(3, 4), max_agents=2, allow_home=False):
    size = draw(st.sampled_from(sizes))
    cells = [(r, c) for r in range(size) for c in range(size)]
    holes = set(draw(st.lists(st.sampled_from(cells), max_size=size * size // 3, unique=True)))
    free = [c for c in cells if c not in holes]
    k = draw(st.integers(min_value=1, max_value=min(max_agents, len(free))))
    starts = draw(st.permutations(free).map(lambda p: p[:k]))
    goals = draw(st.permutations(free).map(lambda p: p[:k]))
    if not allow_home and any(s == g for s, g in zip(starts, goals)):
        goals = goals[1:] + goals[:1] if k > 1 else goals
    grid = ["".join("H" if (r, c) in holes else "F" for c in range(size)) for r in range(size)]
    return grid, list(zip(starts, goals))


def random_instance(rng, size, hole_ratio, k):
    cells = [(r, c) for r in range(size) for c in range(size)]
    holes = set(rng.sample(cells, round(hole_ratio * size * size)))
    free = [c for c in cells if c not in holes]
    starts = rng.sample(free, k)
    goals = rng.sample(free, k)
    while any(s == g for s, g in zip(starts, goals)):
        goals = rng.sample(free, k)
    grid = ["".join("H" if (r, c) in holes else "F" for c in range(size)) for r in range(size)]
    return grid, list(zip(starts, goals))


# ------------------------------------------------------------------ tests


def assert_matches_brute_force(grid, agents):
    sol = solve(grid, agents, time_limit=20)
    expected = brute_force_cost(grid, agents)
    assert_consistent(grid, agents, sol)
    if expected is None:
        assert sol.status == "unsolvable"
    else:
        assert sol.status == "optimal"
        assert sol.cost == expected


FAST = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(tiny_instances(sizes=(3, 4), max_agents=2, allow_home=True))
def test_two_agents_match_brute_force(inst):
    assert_matches_brute_force(*inst)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_instances(sizes=(3,), max_agents=3))
def test_three_agents_match_brute_force(inst):
    assert_matches_brute_force(*inst)


@pytest.mark.parametrize("seed", range(3))
def test_three_agents_on_4x4_match_brute_force(seed):
    rng = random.Random(seed)
    for _ in range(6):
        grid, agents = random_instance(rng, 4, 0.2, 3)
        sol = solve(grid, agents, time_limit=20)
        expected = brute_force_cost(grid, agents)
        assert_consistent(grid, agents, sol)
        assert sol.status == ("unsolvable" if expected is None else "optimal")
        assert sol.cost == expected


@pytest.mark.parametrize("size,k", [(6, 4), (8, 5), (10, 5), (10, 2)])
def test_larger_random_instances_are_valid(size, k):
    rng = random.Random(size * 10 + k)
    for _ in range(40):
        grid, agents = random_instance(rng, size, 0.2, k)
        sol = solve(grid, agents, time_limit=20)
        assert sol.status in ("optimal", "unsolvable")
        assert_consistent(grid, agents, sol)


# The parts a typical instance never reaches (CBS settles it first) get their own
# checks against the brute force.


def _indexed(grid, agents):
    G = solver_module._Grid(grid)
    starts = [G.index(s, "start") for s, _ in agents]
    goals = [G.index(g, "goal") for _, g in agents]
    return G, starts, goals


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_instances(sizes=(3,), max_agents=3, allow_home=True))
def test_joint_search_matches_brute_force(inst):
    grid, agents = inst
    if len({s for s, _ in agents}) < len(agents) or len({g for _, g in agents}) < len(agents):
        return
    G, starts, goals = _indexed(grid, agents)
    dists = [G.bfs(g) for g in goals]
    if any(dists[i][starts[i]] >= solver_module._INF for i in range(len(agents))):
        return
    search = solver_module._joint_search(G, starts, goals, dists, 10**6)
    try:
        while True:
            next(search)
    except StopIteration as done:
        paths = done.value
    expected = brute_force_cost(grid, agents)
    if expected is None:
        assert paths is None
    else:
        cells = [[G.cell(i) for i in p] for p in paths]
        assert check_and_cost(grid, agents, cells) == expected


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_instances(sizes=(3, 4), max_agents=3))
def test_solvability_proofs_match_brute_force(inst):
    grid, agents = inst
    if len(agents) < 2 or len({g for _, g in agents}) < len(agents):
        return
    G, starts, goals = _indexed(grid, agents)
    solvable = brute_force_cost(grid, agents) is not None
    assert _group_solvable(G, starts, goals, 10**6) is solvable
    if len(agents) == 2:
        assert _pair_solvable(G, starts[0], goals[0], starts[1], goals[1]) is solvable


UNDECIDED = "undecided"


def _second_search(grid, agents, seconds=2.0):
    """The second search alone (group bounds, then a CBS with the extra corridor
    reasoning): per-agent paths, None when it proves there are none, UNDECIDED when
    it runs out of time (crowded tiny maps are the joint search's job)."""
    G, starts, goals = _indexed(grid, agents)
    dists = [G.bfs(g) for g in goals]
    deadline = time.perf_counter() + seconds
    search = solver_module._second_search(G, starts, goals, dists, deadline, {}, [])
    try:
        while True:
            next(search)
    except StopIteration as done:
        node = done.value
    except solver_module._Unsolvable:
        return None
    except solver_module._GiveUp:
        return UNDECIDED
    return None if node is None else [[G.cell(i) for i in p.path] for p in node.plans]


def assert_second_search_matches_brute_force(grid, agents):
    if len({s for s, _ in agents}) < len(agents) or len({g for _, g in agents}) < len(agents):
        return False
    if individual_lengths(grid, agents) < 0:
        return False
    paths = _second_search(grid, agents)
    if paths == UNDECIDED:
        return False
    expected = brute_force_cost(grid, agents)
    if expected is None:
        assert paths is None
    else:
        assert paths is not None
        assert check_and_cost(grid, agents, paths) == expected
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_instances(sizes=(3, 4), max_agents=3))
@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_second_search_matches_brute_force(inst):
    assert_second_search_matches_brute_force(*inst)


# One-cell-wide corridors with goals inside them: the second search's corridor
# reasoning (an agent parks in the corridor another one must cross).
CORRIDOR_MAPS = [
    ["FFFFF", "HHFHH", "HHFHH", "FFFFF"],
    ["FFHFF", "FFHFF", "FFFFF", "HHFHH", "FFFFF"],
    ["FFFFF", "HFHHF", "HFFFF", "HHHFH"],
]


@pytest.mark.parametrize("seed", range(6))
def test_second_search_on_corridor_goals_matches_brute_force(seed, monkeypatch):
    fired = []
    original = solver_module._CBS.corridor_goal

    def spy(self, *args):
        out = original(self, *args)
        if out:
            fired.append(out)
        return out

    monkeypatch.setattr(solver_module._CBS, "corridor_goal", spy)
    rng = random.Random(seed)
    decided = 0
    for grid in CORRIDOR_MAPS:
        free = [(r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch == "F"]
        inner = [p for p in free if sum((p[0] + dr, p[1] + dc) in free for dr, dc in ((0, 1), (1, 0), (0, -1), (-1, 0))) == 2]
        for _ in range(8):
            k = rng.choice([2, 3])
            outer = [p for p in free if p not in inner]
            if len(outer) < k:
                continue
            goals = [rng.choice(inner)] + rng.sample(free, k - 1)
            starts = rng.sample(outer, k)
            agents = list(zip(starts, goals))
            if any(s == g for s, g in agents):
                continue
            decided += bool(assert_second_search_matches_brute_force(grid, agents))
    assert decided >= 10
    if seed == 0:
        assert fired, "the corridor-goal reasoning was never used"


@pytest.mark.parametrize("fallback", ["_second_search", "_ICTS"])
def test_fallbacks_run_only_without_a_work_limit_and_for_three_or_more(monkeypatch, fallback):
    def refuse(*args, **kwargs):
        raise AssertionError(f"{fallback} started")

    monkeypatch.setattr(solver_module, fallback, refuse)
    rng = random.Random(5)
    for k in (2, 3, 5):
        grid, agents = random_instance(rng, 8, 0.2, k)
        assert solve(grid, agents, time_limit=20, work_limit=40_000).status != "gave_up"
    grid, agents = random_instance(rng, 8, 0.2, 2)
    assert solve(grid, agents, time_limit=20).status != "gave_up"


def test_second_search_takes_over_after_its_head_start(monkeypatch):
    # with no head start both searches race from the first unit; the verdict is the same
    rng = random.Random(8)
    cases = [random_instance(rng, 10, 0.2, 5) for _ in range(25)]
    before = [solve(grid, agents, time_limit=20) for grid, agents in cases]
    monkeypatch.setattr(solver_module, "_SECOND_AFTER", 0)
    for (grid, agents), old in zip(cases, before):
        sol = solve(grid, agents, time_limit=20)
        assert_consistent(grid, agents, sol)
        assert (sol.status, sol.cost) == (old.status, old.cost)


def test_garbage_collector_state_is_restored():
    import gc

    assert gc.isenabled()
    solve(["FFF", "FHF", "FFF"], [((0, 0), (0, 2)), ((0, 2), (0, 0))])
    assert gc.isenabled()
    gc.disable()
    try:
        solve(["FFF", "FHF", "FFF"], [((0, 0), (0, 2))])
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_start_on_goal_costs_nothing():
    sol = solve(["FFF", "FFF", "FFF"], [((1, 1), (1, 1))])
    assert sol.status == "optimal" and sol.cost == 0 and sol.paths == (((1, 1),),)
    assert sol.requires_wait is False and sol.lower_bound == 0


def test_agent_home_in_the_way_must_step_aside():
    grid = ["FFF", "HFH", "HFH"]
    agents = [((2, 1), (0, 1)), ((1, 1), (1, 1))]
    sol = solve(grid, agents)
    assert sol.status == "optimal"
    assert sol.cost == brute_force_cost(grid, agents)
    assert_consistent(grid, agents, sol)


def test_no_wait_needed_when_paths_are_independent():
    grid = ["FFFF", "FFFF", "FFFF", "FFFF"]
    agents = [((0, 0), (0, 3)), ((3, 0), (3, 3))]
    sol = solve(grid, agents)
    assert sol.cost == sol.lower_bound == 6 and sol.requires_wait is False


def test_head_on_meeting_requires_wait():
    grid = ["FFF", "FHF", "FFF"]
    agents = [((0, 0), (0, 2)), ((0, 2), (0, 0))]
    sol = solve(grid, agents)
    assert sol.status == "optimal" and sol.requires_wait is True
    assert sol.cost == brute_force_cost(grid, agents) > sol.lower_bound


def test_corridor_swap_is_proven_unsolvable_quickly():
    grid = ["FFFFF", "HHHHH", "HHHHH", "HHHHH", "HHHHH"]
    agents = [((0, 0), (0, 4)), ((0, 4), (0, 0))]
    t0 = time.perf_counter()
    sol = solve(grid, agents, time_limit=30)
    assert sol.status == "unsolvable" and time.perf_counter() - t0 < 1.0
    assert sol.lower_bound == 8


def test_swap_in_a_bent_corridor_is_proven_unsolvable_quickly():
    grid = ["FFFFF", "HHHHF", "HHHHF", "HHHHF", "FFFFF"]
    agents = [((0, 1), (3, 4)), ((2, 4), (0, 0))]
    t0 = time.perf_counter()
    sol = solve(grid, agents, time_limit=30)
    assert sol.status == "unsolvable" and time.perf_counter() - t0 < 1.0


def test_three_agents_cannot_rotate_on_a_ring():
    # eight cells around a hole: agents keep their cyclic order
    grid = ["FFF", "FHF", "FFF"]
    agents = [((0, 0), (0, 2)), ((0, 2), (0, 0)), ((2, 2), (2, 1))]
    assert brute_force_cost(grid, agents) is None
    t0 = time.perf_counter()
    sol = solve(grid, agents, time_limit=30)
    assert sol.status == "unsolvable" and time.perf_counter() - t0 < 2.0


def test_walled_off_goal_is_unsolvable():
    grid = ["FFHF", "FFHF", "HHHF", "FFFF"]
    agents = [((0, 0), (0, 3)), ((3, 0), (3, 3))]
    sol = solve(grid, agents)
    assert sol.status == "unsolvable" and sol.lower_bound == -1 and sol.nodes == 0


def test_shared_goal_is_unsolvable():
    sol = solve(["FFF", "FFF", "FFF"], [((0, 0), (1, 1)), ((2, 2), (1, 1))])
    assert sol.status == "unsolvable"


def test_reordering_in_a_dead_end_is_solved():
    # CBS alone thrashes here (the agents must leave the corridor and come back in
    # the other order); the solver has to find the optimum anyway
    grid = ["FFFF", "HFFF", "FHHF", "FFFF"]
    agents = [((3, 0), (3, 3)), ((3, 1), (3, 2))]
    sol = solve(grid, agents, time_limit=30)
    assert sol.status == "optimal" and sol.cost == brute_force_cost(grid, agents) == 18
    assert_consistent(grid, agents, sol)


def test_deterministic():
    rng = random.Random(7)
    for _ in range(20):
        grid, agents = random_instance(rng, 8, 0.2, 4)
        a = solve(grid, agents)
        b = solve(list(grid), [tuple(x) for x in agents])
        assert a == b


def test_distance_map():
    dm = distance_map(["FFF", "HHF", "FFF"], (2, 0))
    assert dm[(2, 0)] == 0 and dm[(0, 0)] == 6 and (1, 0) not in dm


def test_gives_up_at_the_time_limit():
    rng = random.Random(3)
    grid, agents = random_instance(rng, 10, 0.1, 5)
    sol = solve(grid, agents, time_limit=0.0)
    assert sol.status in ("gave_up", "optimal")
    if sol.status == "gave_up":
        assert sol.reason and sol.paths is None


@pytest.mark.parametrize(
    "grid,agents",
    [
        (["FFF", "FHF", "FFF", "FFF"], [((0, 0), (0, 1))]),  # not square is fine
        (["FFX"], [((0, 0), (0, 1))]),
    ],
)
def test_malformed_input(grid, agents):
    if any(set(row) - {"F", "H"} for row in grid):
        with pytest.raises(ValueError):
            solve(grid, agents)
    else:
        assert solve(grid, agents).status == "optimal"


def test_start_on_hole_is_rejected():
    with pytest.raises(ValueError):
        solve(["HF", "FF"], [((0, 0), (1, 1))])


HARD_5X5 = (("HFFHH", "FFHHH", "FFHFH", "FHFFF", "FFFHF"),
            [((2, 0), (1, 0)), ((1, 0), (3, 0)), ((4, 0), (3, 4)), ((3, 4), (2, 0)), ((4, 1), (4, 4))])


def test_work_limit_gives_up_the_same_way_on_any_machine():
    """A give-up by work units, not seconds: the same verdict and node count every time."""
    grid, agents = HARD_5X5
    first = solve(grid, agents, time_limit=600, work_limit=300)
    second = solve(grid, agents, time_limit=600, work_limit=300)
    assert first.status == second.status == "gave_up"
    assert first.reason.startswith("work limit") and first.nodes == second.nodes


def test_work_cap_gives_up_by_work_with_every_search_on():
    """``work_cap``: a give-up in work units (the same on every machine) that, unlike ``work_limit``,
    leaves the fallback searches of three or more agents on; ``Solution.work`` counts the units."""
    grid, agents = HARD_5X5
    first = solve(grid, agents, work_cap=300)
    second = solve(grid, agents, work_cap=300)
    assert first.status == second.status == "gave_up" and first.reason.startswith("work limit of 300")
    assert first.work == second.work and 300 < first.work <= 300 + 16 and first.nodes == second.nodes
    # the fallbacks start after 40,000 units, so within 300 the search is work_limit's own
    limited = solve(grid, agents, work_limit=300)
    assert limited.status == "gave_up" and (limited.work, limited.nodes) == (first.work, first.nodes)
    # a solve that finishes reports its work; no time limit by default
    rng = random.Random(7)
    grid, agents = random_instance(rng, 8, 0.2, 3)
    done = solve(grid, agents)
    assert done.status in ("optimal", "unsolvable") and done == solve(grid, agents, work_cap=10**9)
    with pytest.raises(ValueError, match="work_cap"):
        solve(grid, agents, work_cap=0)


def test_the_throughput_bench_gives_up_by_work_not_seconds():
    """bench/solver_throughput.py (docs/performance.md, "The solver"): its give-up is --work-cap units, so
    its statuses and work maximum are the same on every run and machine; a cap below 1 is refused."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "bench" / "solver_throughput.py"
    args = [sys.executable, str(script), "--agents", "5", "--n", "300", "--seed", "5", "--work-cap", "5"]
    runs = [subprocess.run(args, capture_output=True, text=True, timeout=300) for _ in range(2)]
    for done in runs:
        assert done.returncode == 0, done.stderr
    tails = [re.search(r" ms \| ((?:gave_up|optimal)=.*)$", done.stdout.splitlines()[0]).group(1) for done in runs]
    assert tails[0] == tails[1] and "gave_up=" in tails[0] and "of cap 5" in tails[0]
    bad = subprocess.run([*args[:-1], "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--work-cap" in bad.stderr
