"""Deterministic, stratified generation of certified MAPF-FrozenLake instances.

Each instance is a pure function of ``(size, hole count, agents, wants_wait, seed)``:
its own random stream is seeded from those values, so the same config and seed give
byte-identical data on any machine, whether generated in one process or many. Seeding on
the hole count (:func:`knobs.hole_count`) rather than on the float ``hole_ratio`` keeps a
move smaller than one cell from re-drawing a size's instances, so an engineer arm's
instances stay paired with the fixed arm's. ``seed_scheme="ratio"`` is the legacy
derivation on the float, kept to reproduce data drawn before the change.

``wait_ratio`` is met exactly per size (stratified): that share of a size's instances
are drawn as *wait* instances and the rest as *no-wait* ones, and the solver
certifies each instance's ``optimal_cost`` and ``requires_wait`` before it is kept.
Random placement rarely needs a WAIT with 2 agents on large maps (about 6%), so wait
instances are placed to interact: agent 2 is put on a shortest route that crosses
agent 1's shortest route at the same time step, then the solver decides.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from envengineer.api import ConfigError, EnvEngineerError
from envengineer.tasks.mapf_frozenlake import SIZES
from envengineer.tasks.mapf_frozenlake.knobs import MapfConfig, allocate, hole_count, min_free_cells
from envengineer.tasks.mapf_frozenlake.instance import Agent, Instance, instance_id
from envengineer.tasks.mapf_frozenlake.solver import shortest_paths_suffice, solve

MAX_ATTEMPTS = 2000
#: Solver work (units of search, not seconds) before a draw is discarded: a give-up that
#: does not depend on the machine's speed, so the same config and seed give the same data
#: everywhere. About 5-15 s on one core of a small VM.
WORK_LIMIT = 40_000
#: search steps for the shortest-paths check before a draw goes to the full solve
SHORTCUT_WORK = 100_000
#: No wall-clock limit by default: the work limit bounds every solve. A time limit the caller sets
#: stops generation with an error when it fires (a draw it cut short is never discarded, which
#: would make the data depend on the machine's speed).
TIME_LIMIT: float | None = None
MAX_DUPLICATE_RETRIES = 200

#: How a training instance's seed is derived: from the size's hole count (the default), or from
#: the float hole_ratio (``"ratio"``: the derivation before hole-count seeding, for old data).
SeedScheme = Literal["holes", "ratio"]
SEED_SCHEMES: tuple[str, ...] = ("holes", "ratio")


class GenerationError(EnvEngineerError):
    """A knob setting for which no instance could be produced."""


@dataclass(frozen=True)
class Job:
    size: int
    hole_ratio: float
    agents: int
    wants_wait: bool
    seed: int


@dataclass
class Made:
    instance: Instance
    gave_up: int  # draws discarded at the solver's work limit (deterministic)


def derive_seed(*parts: object) -> int:
    """A 48-bit seed from any parts, identical on every machine and Python version."""
    text = "|".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:6], "big")


@lru_cache(maxsize=None)
def _neighbours(size: int) -> tuple[tuple[int, ...], ...]:
    out = []
    for i in range(size * size):
        r, c = divmod(i, size)
        nb = []
        if r > 0:
            nb.append(i - size)
        if r < size - 1:
            nb.append(i + size)
        if c > 0:
            nb.append(i - 1)
        if c < size - 1:
            nb.append(i + 1)
        out.append(tuple(nb))
    return tuple(out)


def _bfs(size: int, free: Sequence[bool], source: int) -> list[int]:
    """Distances from ``source`` over free cells (-1 where unreachable)."""
    nbrs = _neighbours(size)
    dist = [-1] * (size * size)
    dist[source] = 0
    queue = deque([source])
    while queue:
        cell = queue.popleft()
        d = dist[cell] + 1
        for nb in nbrs[cell]:
            if free[nb] and dist[nb] < 0:
                dist[nb] = d
                queue.append(nb)
    return dist


def _random_placement(rng: random.Random, size: int, free: list[bool], agents: int) -> list[tuple[int, int]] | None:
    cells = [i for i, ok in enumerate(free) if ok]
    if len(cells) < agents + 1:
        return None
    starts = rng.sample(cells, agents)
    goals: list[int] = []
    for start in starts:
        dist = _bfs(size, free, start)
        options = [g for g in cells if dist[g] > 0 and g not in goals]
        if not options:
            return None
        goals.append(rng.choice(options))
    return list(zip(starts, goals))


def _shortest_route(rng: random.Random, size: int, free: list[bool], start: int, goal: int) -> list[int]:
    to_goal = _bfs(size, free, goal)
    nbrs = _neighbours(size)
    route = [start]
    cell = start
    while cell != goal:
        steps = [nb for nb in nbrs[cell] if free[nb] and to_goal[nb] == to_goal[cell] - 1]
        cell = rng.choice(steps)
        route.append(cell)
    return route


def _crossing_placement(rng: random.Random, size: int, free: list[bool], agents: int) -> list[tuple[int, int]] | None:
    """Agents 1 and 2 on shortest routes through one cell at one time; the rest at random."""
    base = _random_placement(rng, size, free, agents)
    if base is None:
        return None
    (s1, g1) = base[0]
    route = _shortest_route(rng, size, free, s1, g1)
    t = rng.randrange(1, len(route))
    meet = route[t]
    from_meet = _bfs(size, free, meet)
    taken_starts = {s for s, _ in base[2:]} | {s1}
    starts = [i for i, d in enumerate(from_meet) if d == t and i not in taken_starts]
    if not starts:
        return None
    s2 = rng.choice(starts)
    from_s2 = _bfs(size, free, s2)
    taken_goals = {g for _, g in base[2:]} | {g1}
    goals = [
        i
        for i, d in enumerate(from_meet)
        if d >= 0 and i != s2 and i not in taken_goals and from_s2[i] == t + d
    ]
    if not goals:
        return None
    return [(s1, g1), (s2, rng.choice(goals)), *base[2:]]


def make_instance(
    job: Job, *, time_limit: float | None = TIME_LIMIT, work_limit: int = WORK_LIMIT, max_attempts: int = MAX_ATTEMPTS
) -> Made:
    """Draw maps and placements from the job's own stream until the solver certifies one."""
    rng = random.Random(job.seed)
    size = job.size
    n_cells = size * size
    n_holes = hole_count(size, job.hole_ratio)
    gave_up = 0
    for _ in range(max_attempts):
        holes = set(rng.sample(range(n_cells), n_holes))
        free = [i not in holes for i in range(n_cells)]
        place = _crossing_placement if job.wants_wait else _random_placement
        placement = place(rng, size, free, job.agents)
        if placement is None:
            continue
        grid = tuple(
            "".join("H" if r * size + c in holes else "F" for c in range(size)) for r in range(size)
        )
        agents = tuple(Agent(divmod(s, size), divmod(g, size)) for s, g in placement)
        pairs = [(a.start, a.goal) for a in agents]
        # Cheap first: can every agent keep to a shortest path? Yes settles a no-WAIT draw (its
        # optimum is the sum of those lengths) and rejects a WAIT draw; no rejects a no-WAIT draw.
        # Only what is left needs the optimum certified. The accepted instances are the ones the
        # full solve alone would accept.
        suffice, cost = shortest_paths_suffice(grid, pairs, work_limit=SHORTCUT_WORK)
        if suffice is not None and suffice == job.wants_wait:
            continue  # a WAIT draw whose shortest paths suffice, or a no-WAIT draw whose do not
        if suffice is None or job.wants_wait:
            solution = solve(grid, pairs, time_limit=time_limit, work_limit=work_limit)
            if solution.status == "gave_up":
                if not solution.reason.startswith("work limit"):
                    raise GenerationError(
                        f"sizes.{size}x{size}: the solver's time limit (task.solver_time_limit: {time_limit:g} s) cut a "
                        f"{job.agents}-agent draw short after {solution.work} of its {work_limit} work units ({solution.reason}); "
                        "the data would depend on this machine's speed: unset task.solver_time_limit (the work limit "
                        "bounds every solve) or raise it"
                    )
                gave_up += 1
                continue
            if solution.status != "optimal" or solution.requires_wait != job.wants_wait:
                continue
            cost = solution.cost
        instance = Instance(
            size=size,
            grid=grid,
            agents=agents,
            hole_ratio=job.hole_ratio,
            optimal_cost=cost,
            requires_wait=job.wants_wait,
            seed=job.seed,
            id=instance_id(size, grid, agents),
        )
        return Made(instance, gave_up)
    kind = "that need a WAIT" if job.wants_wait else "that need no WAIT"
    raise GenerationError(
        f"sizes.{size}x{size}: found no solvable {job.agents}-agent instance {kind} at "
        f"hole_ratio {job.hole_ratio:g} in {max_attempts} draws; change hole_ratio or wait_ratio"
    )


def _check_scheme(seed_scheme: str) -> None:
    if seed_scheme not in SEED_SCHEMES:
        raise ConfigError(f"seed_scheme: must be one of {', '.join(SEED_SCHEMES)}, got {seed_scheme!r}")


def plan_jobs(config: MapfConfig, *, n: int, seed: int, agents: int, seed_scheme: SeedScheme = "holes") -> list[Job]:
    """The run's jobs in canonical order (size, then wait stratum, then index).

    A job's seed names its size's hole count (``seed_scheme="holes"``), so hole_ratio moves that
    keep the count give the same instances; ``"ratio"`` names the float (the legacy derivation).
    It names the agent count too: ``agents``, or the size's own ``agents`` where the config has
    one (the agents knob, :func:`knobs.agents_config_model`), so each count draws its own
    instances and a size left at ``agents`` draws the instances it draws without the knob.
    """
    _check_scheme(seed_scheme)
    counts = allocate(config, n)
    jobs: list[Job] = []
    for size in SIZES:
        count = counts[size]
        if count == 0:
            continue
        knobs = config.knobs(size)
        k = getattr(knobs, "agents", agents)
        holes = hole_count(size, knobs.hole_ratio)
        free = size * size - holes
        if free < min_free_cells(k):
            raise ConfigError(
                f"sizes.{size}x{size}.hole_ratio: {k} agents need at least {min_free_cells(k)} "
                f"free cells; a {size}x{size} map with hole_ratio {knobs.hole_ratio:g} has {free}"
            )
        waits = int(knobs.wait_ratio * count + 0.5)
        if waits and k < 2:
            raise ConfigError(
                f"sizes.{size}x{size}.wait_ratio: a single agent never needs to WAIT; set wait_ratio to 0 for 1 agent"
            )
        for wants_wait, stratum in ((True, waits), (False, count - waits)):
            for index in range(stratum):
                if seed_scheme == "ratio":
                    job_seed = derive_seed("mfl", seed, size, k, knobs.hole_ratio, int(wants_wait), index)
                else:
                    job_seed = derive_seed("mfl-holes", seed, size, k, holes, int(wants_wait), index)
                # the job keeps the configured hole_ratio: the record stores it, the map has ``holes``
                jobs.append(Job(size, knobs.hole_ratio, k, wants_wait, job_seed))
    return jobs


def _make_chunk(args: tuple[list[Job], float, int]) -> list[Made]:
    jobs, time_limit, work_limit = args
    return [make_instance(job, time_limit=time_limit, work_limit=work_limit) for job in jobs]


def generate(
    config: MapfConfig,
    *,
    n: int,
    seed: int,
    agents: int = 2,
    workers: int = 1,
    time_limit: float | None = TIME_LIMIT,
    work_limit: int = WORK_LIMIT,
    progress: Callable[[int], None] | None = None,
    seed_scheme: SeedScheme = "holes",
) -> tuple[list[Instance], dict[str, int]]:
    """``n`` certified instances in a seeded shuffled order, and the discard counts.

    ``agents``: every size's agent count, unless the config gives a size its own (the agents
    knob); the order's seed names ``agents`` either way. ``workers > 1`` spreads the jobs over processes; the output is identical. ``seed_scheme``:
    see :func:`plan_jobs` (the duplicate redraws and the order derive from the job seeds and
    ``seed``, never from the float hole_ratio).
    """
    if n < 0:
        raise ConfigError(f"n: must be non-negative, got {n}")
    if agents < 1:
        raise ConfigError(f"agents: must be at least 1, got {agents}")
    jobs = plan_jobs(config, n=n, seed=seed, agents=agents, seed_scheme=seed_scheme)
    made: list[Made] = []
    if workers > 1 and len(jobs) > 1:
        chunk = max(1, min(64, len(jobs) // (workers * 4) or 1))
        chunks = [(jobs[i : i + chunk], time_limit, work_limit) for i in range(0, len(jobs), chunk)]
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for part in pool.map(_make_chunk, chunks):
                made.extend(part)
                if progress:
                    progress(len(part))
    else:
        for job in jobs:
            made.append(make_instance(job, time_limit=time_limit, work_limit=work_limit))
            if progress:
                progress(1)

    # Duplicates (possible on tiny maps) are redrawn from a derived seed, in canonical order.
    seen: set[str] = set()
    instances: list[Instance] = []
    discarded: Counter[str] = Counter()
    for job, item in zip(jobs, made):
        discarded["solver_gave_up"] += item.gave_up
        instance = item.instance
        retry = 0
        while instance.id in seen:
            retry += 1
            if retry > MAX_DUPLICATE_RETRIES:
                raise GenerationError(
                    f"sizes.{job.size}x{job.size}: too few distinct {job.agents}-agent instances at "
                    f"hole_ratio {job.hole_ratio:g} for this budget; lower the ratio of this size"
                )
            discarded["duplicate"] += 1
            again = make_instance(
                Job(job.size, job.hole_ratio, job.agents, job.wants_wait, derive_seed(job.seed, "dup", retry)),
                time_limit=time_limit,
                work_limit=work_limit,
            )
            discarded["solver_gave_up"] += again.gave_up
            instance = again.instance
        seen.add(instance.id)
        instances.append(instance)
    random.Random(derive_seed("order", seed, n, agents)).shuffle(instances)
    return instances, {key: value for key, value in discarded.items() if value}
