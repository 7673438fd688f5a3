"""The frozen validation set: every digit group x 2-5 addends, seeded by the set's name."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from envengineer.api import Benchmark, frozen_benchmark

from envengineer_arith.knobs import GROUPS

DATA = Path(__file__).parent / "data"  # package data (pyproject.toml: [tool.setuptools.package-data])
VALIDATION = "arith-val"
#: The validation set: every digit group × these addend counts, this many instances each (3 × 4 × 10 = 120).
VALIDATION_TERMS = (2, 3, 4, 5)
VALIDATION_PER_CELL = 10


def build_validation_set() -> list[dict[str, Any]]:
    """The frozen validation set's records in file order: the recipe ``envengineer bench build`` reruns.

    Seeded by the set's name and the cell, never by the training seeds, so no round's training
    set draws the same stream."""
    records = []
    for gi, group in enumerate(GROUPS):
        digits = gi + 1
        for count in VALIDATION_TERMS:
            for index in range(VALIDATION_PER_CELL):
                rng = random.Random(f"{VALIDATION}|{group}|{count}|{index}")
                terms = [rng.randint(10 ** (digits - 1), 10**digits - 1) for _ in range(count)]
                records.append({"id": f"{VALIDATION}-{group}-{count}-{index}", "group": group, "terms": terms, "answer": sum(terms)})
    return records


def specs() -> list[Benchmark]:
    return [frozen_benchmark(
        DATA / f"{VALIDATION}.jsonl", name=VALIDATION, task="arith",
        description="arith validation set: 120 sums over every digit group and 2-5 addends",
        build=build_validation_set, label="validation",
    )]
