"""The frozen mapf-frozenlake benchmark sets and the 2-agent validation set.

Each set crosses the map sizes that fit the agent count, five hole ratios, and three
wait-ratio subsets (``wr_025``, ``wr_050``, ``wr_075``: that share of each
size × hole-ratio cell needs a WAIT). A size fits ``k`` agents when a map at the
largest hole ratio keeps at least ``2k + 1`` free cells.
"""

from __future__ import annotations

from pathlib import Path

from envengineer.api import Aggregate, Benchmark, Grouping, frozen_benchmark
from envengineer.tasks.mapf_frozenlake import TASK_NAME
from envengineer.tasks.mapf_frozenlake.knobs import sizes_fitting
from envengineer.tasks.mapf_frozenlake.draw import Job, derive_seed, make_instance

FOLDER = Path(__file__).parent / "data"
HOLE_RATIOS = (0.0, 0.1, 0.2, 0.3, 0.4)
SUBSETS = {"wr_025": 0.25, "wr_050": 0.5, "wr_075": 0.75}
PER_CELL = 4  # instances per size × hole ratio × subset
#: The wait-ratio subsets (record field ``subset``), and the paper's headline "Sum" over them.
SUBSET_GROUPING = Grouping("subset", order=tuple(SUBSETS))
SUM_OVER_SUBSETS = Aggregate(key="sum_over_subsets", title="Sum over subsets", how="sum", metrics=("valid", "optimal"))


def fitting_sizes(agents: int) -> tuple[int, ...]:
    """The sizes a set of ``agents`` crosses: those that fit them at its largest hole ratio."""
    return sizes_fitting(agents, max(HOLE_RATIOS))


def build_set(name: str, agents: int, avoid: str | None = None) -> list[dict]:
    """The set's records in canonical order; a repeated instance (tiny maps) is redrawn, and so is
    one of set ``avoid`` (a test set shares no instance with the validation set it mirrors)."""
    records = []
    seen: set[str] = {r["id"] for r in build_set(avoid, agents)} if avoid else set()
    for subset, wait_ratio in SUBSETS.items():
        waits = int(wait_ratio * PER_CELL + 0.5)
        for size in fitting_sizes(agents):
            for hole_ratio in HOLE_RATIOS:
                for index in range(PER_CELL):
                    # the set's own derivation (on the float hole ratio), not generator.plan_jobs's: the frozen bytes rest on it
                    seed = derive_seed("bench", name, subset, size, hole_ratio, index)
                    record = make_instance(Job(size, hole_ratio, agents, index < waits, seed)).instance.to_record()
                    retry = 0
                    while record["id"] in seen:
                        retry += 1
                        redraw = Job(size, hole_ratio, agents, index < waits, derive_seed(seed, "dup", retry))
                        record = make_instance(redraw).instance.to_record()
                    seen.add(record["id"])
                    record["subset"] = subset
                    records.append(record)
    return records


def _spec(name: str, agents: int, description: str, avoid: str | None = None) -> Benchmark:
    return frozen_benchmark(
        FOLDER / f"{name}.jsonl",
        name=name,
        task=TASK_NAME,
        description=description,
        options={"agents": agents},
        subsets=SUBSET_GROUPING,
        aggregate=SUM_OVER_SUBSETS,
        build=lambda: build_set(name, agents, avoid),
        label=f"{agents} agents",
        order=agents,
    )


def specs() -> list[Benchmark]:
    return [
        _spec("mapf-2agents-val", 2, "2-agent validation set: the loop's evidence"),
        _spec("mapf-2agents-test", 2, "2-agent test set, drawn like the validation set (no shared instance): held out from the engineer",
              avoid="mapf-2agents-val"),
        _spec("mapf-3agents", 3, "3-agent generalisation benchmark"),
        _spec("mapf-4agents", 4, "4-agent generalisation benchmark"),
        _spec("mapf-5agents", 5, "5-agent generalisation benchmark"),
    ]
