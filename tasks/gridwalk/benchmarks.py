"""The frozen grid-walk sets: the validation set (the engineers' evidence), the held-out target (k = 9 and 10)
and the never-trained target (k = 11 and 12), each every walk length x grid size, seeded by the set's name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envengineer.api import Benchmark, frozen_benchmark
from envengineer.tasks.gridwalk import TASK_NAME
from envengineer.tasks.gridwalk.knobs import MAX_SIZE, MIN_MOVES, MIN_SIZE
from envengineer.tasks.gridwalk.walk import make_record

FOLDER = Path(__file__).parent / "data"
VALIDATION = "grid-walk-val"
TARGET = "grid-walk-target"
BEYOND = "grid-walk-beyond"
#: The validation set: k = 3 … 8 (the groups an engineer reads), 40 walks each at every grid size the knob allows.
VALIDATION_MOVES = tuple(range(MIN_MOVES, 9))
VALIDATION_PER_CELL = 8
#: The held-out target: unseen walks of the two longest *trained* lengths, k = 9 and 10, 40 walks at each grid
#: size (400); no engineer reads it, but every arm may train on k9 and k10 (they are groups of the knob table).
TARGET_MOVES = (9, 10)
TARGET_PER_CELL = 40
#: The never-trained target: k = 11 and 12, outside the knob table (no config can ask for them: ``moves_of``
#: refuses the group) and outside the warm start (its long tail stops at MAX_MOVES), 40 walks at each grid size.
BEYOND_MOVES = (11, 12)
BEYOND_PER_CELL = 40


def untrained_lengths() -> tuple[int, ...]:
    """The walk lengths no training stream of this task can hold: those of the never-trained target."""
    return BEYOND_MOVES


def build_set(name: str, moves: tuple[int, ...], per_cell: int) -> list[dict[str, Any]]:
    """A frozen set's records in file order: every k × grid size, ``per_cell`` walks each, seeded by the
    set's name (never by a training seed); a walk already in the set is redrawn (the validation and target
    sets share no walk: their lengths differ)."""
    seen: set[str] = set()
    records = []
    for k in moves:
        for size in range(MIN_SIZE, MAX_SIZE + 1):
            for index in range(per_cell):
                retry = 0
                record = make_record(f"{name}|{k}|{size}|{index}", size, k)
                while record["id"] in seen and retry < 20:
                    retry += 1
                    record = make_record(f"{name}|{k}|{size}|{index}|{retry}", size, k)
                seen.add(record["id"])
                records.append(record)
    return records


SETS = {
    VALIDATION: lambda: build_set(VALIDATION, VALIDATION_MOVES, VALIDATION_PER_CELL),
    TARGET: lambda: build_set(TARGET, TARGET_MOVES, TARGET_PER_CELL),
    BEYOND: lambda: build_set(BEYOND, BEYOND_MOVES, BEYOND_PER_CELL),
}


def specs() -> list[Benchmark]:
    return [
        frozen_benchmark(
            FOLDER / f"{VALIDATION}.jsonl", name=VALIDATION, task=TASK_NAME,
            description=f"grid-walk validation set: k = 3-8 moves x grid 3-7, {VALIDATION_PER_CELL} walks each (the engineers' evidence)",
            build=SETS[VALIDATION], label="validation",
        ),
        frozen_benchmark(
            FOLDER / f"{TARGET}.jsonl", name=TARGET, task=TASK_NAME,
            description=f"grid-walk held-out target: unseen walks of the trained lengths k = 9 and 10 x grid 3-7, {TARGET_PER_CELL} walks each "
                        "(no engineer reads it; k9 and k10 are training groups)",
            build=SETS[TARGET], label="target",
        ),
        frozen_benchmark(
            FOLDER / f"{BEYOND}.jsonl", name=BEYOND, task=TASK_NAME,
            description=f"grid-walk never-trained target: k = 11 and 12 moves x grid 3-7, {BEYOND_PER_CELL} walks each "
                        "(no knob table holds these lengths and no warm start draws them: no run trains on them)",
            build=SETS[BEYOND], label="beyond",
        ),
    ]
