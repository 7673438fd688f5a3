"""The frozen reasoning-gym benchmark sets (docs/reasoning-gym.md, "Benchmarks").

- ``rg-val``: the validation mix, the loop's evidence: the default datasets, 40 items each, every
  level drawn uniformly from 0 to the dataset's cap (so it mixes every level a run can train at);
- ``rg-hard``: the default datasets at the hard end, 20 items each: even items with every level at
  its cap, odd items with each level drawn from above the cap's middle (``cap // 2 + 1 .. cap``);
- ``rg-transfer``: the vetted catalogue datasets outside the default list (never trained on by a
  default run), 120 items split evenly, levels drawn from 0 to the caps like ``rg-val``;
- ``rg-chain-sum-val``: the validation set of a run on chain_sum alone (the CPU quickstart's), 400 items
  with each level drawn from 0 to 2 (2-4 terms of 1-3 digits): the levels a run starting at 0 reaches in a
  few rounds of one-level moves.

Everything is seeded by the set's name (never by a round seed): item ``i`` of dataset ``d`` in set
``S`` draws its levels from ``Random("S|d|i|levels")`` and is reasoning-gym's item at those levels
with seed ``sha256("S|d|i")[:8]`` (``|retry`` appended when it repeats a question of the set, at most 5 times).
reasoning_gym is imported only when a set is built, so listing and verifying work without it.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

from envengineer.api import Benchmark, Grouping, frozen_benchmark
from envengineer.tasks.reasoning_gym import TASK_NAME
from envengineer.tasks.reasoning_gym.catalogue import CATALOGUE, DEFAULT_DATASETS

FOLDER = Path(__file__).parent / "data"
VALIDATION = "rg-val"
HARD = "rg-hard"
TRANSFER = "rg-transfer"
CHAIN_SUM = "rg-chain-sum-val"
#: The vetted datasets a default run never trains on.
TRANSFER_DATASETS: tuple[str, ...] = tuple(name for name in CATALOGUE if name not in DEFAULT_DATASETS)
VAL_PER_DATASET = 40
HARD_PER_DATASET = 20
TRANSFER_ITEMS = 120
CHAIN_SUM_ITEMS = 400
#: rg-chain-sum-val's levels: each drawn uniformly from 0 to this.
CHAIN_SUM_TOP = {"num_terms": 2, "num_digits": 2}
#: A question the set already holds is redrawn at most this many times (tower_of_hanoi at its lowest
#: levels has only a few distinct puzzles: repeats are then kept).
MAX_REDRAWS = 5


def _seed(*parts: Any) -> int:
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "big")


def mixed_levels(name: str, dataset: str, index: int) -> dict[str, int]:
    """Every level uniform in 0..cap."""
    rng = random.Random(f"{name}|{dataset}|{index}|levels")
    return {attr: rng.randint(0, cap) for attr, cap in CATALOGUE[dataset].caps.items()}


def low_levels(name: str, dataset: str, index: int) -> dict[str, int]:
    """Every level uniform in 0..CHAIN_SUM_TOP (chain_sum's attributes)."""
    rng = random.Random(f"{name}|{dataset}|{index}|levels")
    return {attr: rng.randint(0, min(CHAIN_SUM_TOP[attr], cap)) for attr, cap in CATALOGUE[dataset].caps.items()}


def hard_levels(name: str, dataset: str, index: int) -> dict[str, int]:
    """Even items: every level at its cap; odd items: each level above the cap's middle."""
    caps = CATALOGUE[dataset].caps
    if index % 2 == 0:
        return dict(caps)
    rng = random.Random(f"{name}|{dataset}|{index}|levels")
    return {attr: rng.randint(min(cap, cap // 2 + 1), cap) for attr, cap in caps.items()}


def build_set(name: str, plan: dict[str, int], levels_for: Any) -> list[dict[str, Any]]:
    """The set's records in file order: ``plan`` gives the items per dataset (in order)."""
    from envengineer.tasks.reasoning_gym.items import make_item

    records = []
    seen: set[str] = set()
    for dataset, count in plan.items():
        for index in range(count):
            levels = levels_for(name, dataset, index)
            item = make_item(dataset, levels, _seed(name, dataset, index))
            retry = 0
            while item["question"] in seen and retry < MAX_REDRAWS:
                retry += 1
                item = make_item(dataset, levels, _seed(name, dataset, index, retry))
            seen.add(item["question"])
            records.append({
                "id": f"{name}-{dataset}-{index}", "dataset": dataset, "levels": levels,
                "question": item["question"], "answer": item["answer"], "metadata": item["metadata"],
            })
    return records


def build_validation() -> list[dict[str, Any]]:
    return build_set(VALIDATION, {d: VAL_PER_DATASET for d in DEFAULT_DATASETS}, mixed_levels)


def build_hard() -> list[dict[str, Any]]:
    return build_set(HARD, {d: HARD_PER_DATASET for d in DEFAULT_DATASETS}, hard_levels)


def build_transfer() -> list[dict[str, Any]]:
    from envengineer.api import split_budget

    return build_set(TRANSFER, split_budget({d: 1.0 for d in TRANSFER_DATASETS}, TRANSFER_ITEMS), mixed_levels)


def build_chain_sum() -> list[dict[str, Any]]:
    return build_set(CHAIN_SUM, {"chain_sum": CHAIN_SUM_ITEMS}, low_levels)


def _spec(name: str, datasets: tuple[str, ...], build: Any, description: str, label: str, order: int) -> Benchmark:
    return frozen_benchmark(
        FOLDER / f"{name}.jsonl",
        name=name,
        task=TASK_NAME,
        description=description,
        options={"datasets": list(datasets)},
        subsets=Grouping("dataset", order=datasets),
        build=build,
        label=label,
        order=order,
    )


def specs() -> list[Benchmark]:
    return [
        _spec(VALIDATION, DEFAULT_DATASETS, build_validation,
              f"reasoning-gym validation mix: the {len(DEFAULT_DATASETS)} default datasets x {VAL_PER_DATASET}, levels 0 to the caps",
              "validation", 0),
        _spec(HARD, DEFAULT_DATASETS, build_hard,
              f"reasoning-gym hard set: the default datasets x {HARD_PER_DATASET}, levels at the caps or above their middle",
              "hard", 1),
        _spec(TRANSFER, TRANSFER_DATASETS, build_transfer,
              f"reasoning-gym transfer set: {TRANSFER_ITEMS} items of the vetted datasets outside the defaults "
              f"({', '.join(TRANSFER_DATASETS)})", "transfer", 2),
        _spec(CHAIN_SUM, ("chain_sum",), build_chain_sum,
              f"reasoning-gym chain_sum validation: {CHAIN_SUM_ITEMS} sums with 2-4 terms of 1-3 digits (levels 0-2), "
              "for runs on chain_sum alone", "validation", 3),
    ]
