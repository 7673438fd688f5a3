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

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from envengineer.api import (
    Benchmark,
    GenerationResult,
    Generator,
    Grouping,
    Knob,
    Validator,
    Verdict,
    hookimpl,
    read_checksums,
    split_budget,
)
from envengineer.tasks.gridwalk import TASK_NAME

MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
MIN_MOVES, MAX_MOVES = 3, 10
GROUPS = tuple(f"k{k}" for k in range(MIN_MOVES, MAX_MOVES + 1))
MIN_SIZE, MAX_SIZE, DEFAULT_SIZE = 3, 7, 5
RATIO_FLOOR = 0.01
STYLES = ("full", "compact")
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


class GroupKnobs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ratio: float = Field(1 / len(GROUPS), ge=0, le=1, description="share of the round's training budget")
    size: int = Field(DEFAULT_SIZE, ge=MIN_SIZE, le=MAX_SIZE, description="grid side N (an N x N grid)")


class GridWalkConfig(BaseModel):
    """The generator config the engineer rewrites: per walk length, a budget share and a grid size."""

    model_config = ConfigDict(extra="forbid")
    groups: dict[str, GroupKnobs] = Field(default_factory=lambda: {g: GroupKnobs() for g in GROUPS})


class GridWalkOptions(BaseModel):
    """The ``task:`` section of a run config for grid-walk."""

    model_config = ConfigDict(extra="forbid")
    name: Literal["grid-walk"] = TASK_NAME
    prompt_style: Literal["full", "compact"] = Field("full", description="prompt rendering for the policy")
    warm_start_max_moves: int = Field(4, ge=1, le=MAX_MOVES, description="the tiny policy's warm start learns walks of 1 to this many moves, "
                                      "on every grid size")
    warm_start_long_share: float = Field(0.05, ge=0, le=1, description="share of the warm start's walks that are longer than "
                                         "warm_start_max_moves (k drawn evenly up to 10): a thin tail that leaves the long walks "
                                         "rare but not unseen (the recipe that passes the frontier gate: docs/results-frontier.md); 0: longer walks are never shown")


def moves_of(group: str) -> int:
    """``k7`` -> 7; ``ValueError`` naming the group otherwise."""
    if not (isinstance(group, str) and re.fullmatch(r"k\d{1,2}", group) and MIN_MOVES <= int(group[1:]) <= MAX_MOVES):
        raise ValueError(f"grid-walk group {group!r}: expected one of {', '.join(GROUPS)}")
    return int(group[1:])


def walk(rng: random.Random, size: int, k: int) -> dict[str, Any]:
    """A start cell and ``k`` moves that stay on the ``size`` x ``size`` grid, and the cells visited."""
    row, col = rng.randrange(size), rng.randrange(size)
    start, moves, path = [row, col], [], []
    for _ in range(k):
        allowed = [m for m, (dr, dc) in MOVES.items() if 0 <= row + dr < size and 0 <= col + dc < size]
        move = rng.choice(allowed)
        row, col = row + MOVES[move][0], col + MOVES[move][1]
        moves.append(move)
        path.append([row, col])
    return {"size": size, "start": start, "moves": "".join(moves), "k": k, "path": path}


def make_record(key: str, size: int, k: int) -> dict[str, Any]:
    """The walk seeded by ``key`` (a string: the same on every machine), as a record."""
    record = walk(random.Random(f"grid-walk|{key}"), size, k)
    return {"id": f"gw-{size}-{k}-{record['start'][0]}_{record['start'][1]}-{record['moves']}", "group": f"k{k}", **record}


def untrained_lengths() -> tuple[int, ...]:
    """The walk lengths no training stream of this task can hold: those of the never-trained target."""
    return BEYOND_MOVES


def cells_text(path: list[list[int]]) -> str:
    return " ".join(f"{r}_{c}" for r, c in path)


def moves_label(k: Any) -> str:
    return f"k{k}"


def size_label(size: Any) -> str:
    return f"{size}x{size}"


GROUPINGS = (
    Grouping("moves", title="moves", field="k", label=moves_label, order=GROUPS + tuple(f"k{k}" for k in BEYOND_MOVES)),
    Grouping("size", title="grid", label=size_label, order=tuple(size_label(s) for s in range(MIN_SIZE, MAX_SIZE + 1))),
)


class GridWalkGenerator(Generator):
    name: ClassVar[str] = TASK_NAME
    description: ClassVar[str] = "Follow k moves on an N x N grid and list the cells visited (k = 3-10; the frontier testbed)"
    Options: ClassVar[type[BaseModel]] = GridWalkOptions
    config_model: ClassVar[type[BaseModel]] = GridWalkConfig
    prompt_styles: ClassVar[tuple[str, ...]] = STYLES
    knob_table: ClassVar[str | None] = "groups"
    knobs: ClassVar[tuple[Knob, ...]] = (
        Knob("ratio", RATIO_FLOOR, 1.0, 0.0001, share=True, description="share of the round's training budget on walks of this length"),
        Knob("size", MIN_SIZE, MAX_SIZE, 1, integer=True, harder="up", description="grid side N: more cells to name, fewer moves blocked by the border"),
    )
    groupings: ClassVar[tuple[Grouping, ...]] = GROUPINGS
    validation_benchmark: ClassVar[str | None] = VALIDATION
    #: the walk length is the task's difficulty, and each group is one length: k3 (level 0) … k10
    groups_are_levels: ClassVar[bool] = True

    options: GridWalkOptions

    def generate(self, config: BaseModel, *, n: int, seed: int, workers: int | None = None, progress: Any = None) -> GenerationResult:
        cfg = GridWalkConfig.model_validate(config.model_dump())
        groups = [g for g in GROUPS if g in cfg.groups] + [g for g in cfg.groups if g not in GROUPS]
        for g in groups:
            moves_of(g)
        if sum(cfg.groups[g].ratio for g in groups) <= 0:
            raise ValueError("grid-walk config: the groups' ratio shares sum to 0")
        counts = split_budget({g: cfg.groups[g].ratio for g in groups}, n)
        records = []
        for g in groups:
            size, k = cfg.groups[g].size, moves_of(g)
            for index in range(counts[g]):
                # seeded on the group, the grid size and the index: a share move keeps the first instances of a group
                records.append(make_record(f"train|{seed}|{g}|{size}|{index}", size, k))
                if progress:
                    progress(1)
        return GenerationResult(records)

    def render(self, record: Mapping[str, Any], style: str | None = None) -> list[dict[str, str]] | str:
        style = style or self.options.prompt_style
        self.check_record(record)
        r, c = record["start"]
        if style == "compact":
            return f"G{record['size']} {r}_{c} {' '.join(record['moves'])} ="
        if style == "full":
            names = {"U": "up", "D": "down", "L": "left", "R": "right"}
            n = record["size"]
            text = (
                f"You stand on a {n}x{n} grid at cell {r}_{c} (cells are row_column; row 0 is the top row, column 0 the "
                f"left column). Make these {record['k']} moves in order: {', '.join(names[m] for m in record['moves'])}. "
                "Up decreases the row, down increases it, left decreases the column, right increases it; no move leaves the grid.\n"
                f"List the cell you stand on after each move, {record['k']} cells separated by spaces, inside <answer></answer>, "
                "e.g. <answer>1_2 1_3</answer>."
            )
            return [{"role": "user", "content": text}]
        raise ValueError(f"unknown prompt style {style!r} (styles: {', '.join(STYLES)})")

    def check_record(self, record: Mapping[str, Any]) -> None:
        for key in ("size", "start", "moves", "k"):
            if key not in record:
                raise ValueError(f"grid-walk record {record.get('id', '?')!r}: missing field {key!r}")
        size, moves, k = record["size"], record["moves"], record["k"]
        if not isinstance(size, int) or not MIN_SIZE <= size <= MAX_SIZE:
            raise ValueError(f"grid-walk record {record.get('id', '?')!r}: field 'size' must be an integer {MIN_SIZE}-{MAX_SIZE}, got {size!r}")
        if not isinstance(moves, str) or any(m not in MOVES for m in moves) or len(moves) != k:
            raise ValueError(f"grid-walk record {record.get('id', '?')!r}: field 'moves' must be {k!r} letters of UDLR, got {moves!r}")
        start = record["start"]
        if not (isinstance(start, list) and len(start) == 2 and all(isinstance(v, int) and 0 <= v < size for v in start)):
            raise ValueError(f"grid-walk record {record.get('id', '?')!r}: field 'start' must be [row, col] on the grid, got {start!r}")

    def decode_response(self, record: Mapping[str, Any], response: str, style: str | None = None) -> str:
        """Compact answers are bare cells; the validator reads ``<answer>…</answer>``."""
        if (style or self.options.prompt_style) == "compact":
            return f"<answer>{response.strip()}</answer>"
        return response

    def guidelines(self) -> str:
        return (
            "Task: grid walks. An instance is a start cell and k moves (U/D/L/R) on an N x N grid; the policy must list the "
            f"k cells visited. Groups k{MIN_MOVES}-k{MAX_MOVES} are walks of that many moves: longer walks are harder. Knobs per group: "
            f"ratio (share of the training budget, at least {RATIO_FLOOR}) and size (grid side {MIN_SIZE}-{MAX_SIZE}). The policy is judged "
            "on walks longer than any validation group holds."
        )

    def reference_answer(self, record: Mapping[str, Any]) -> str:
        return f"<answer>{cells_text(solve(record))}</answer>"

    def reference_completion(self, record: Mapping[str, Any], style: str) -> str:
        if style == "compact":
            return cells_text(solve(record))
        return self.reference_answer(record)

    def warm_start_pairs(self, *, n: int, seed: int, style: str) -> list[tuple[str, str]]:
        """Walks of 1 to ``warm_start_max_moves`` moves on every grid size, drawn in turn; a
        ``warm_start_long_share`` of them replaced by longer walks (up to 10 moves)."""
        top, tail = self.options.warm_start_max_moves, self.options.warm_start_long_share
        sizes = range(MIN_SIZE, MAX_SIZE + 1)
        pairs = []
        for index in range(n):
            k, size = 1 + index % top, sizes[(index // top) % len(sizes)]
            rng = random.Random(f"grid-walk|warm-length|{seed}|{index}")
            if tail and top < MAX_MOVES and rng.random() < tail:
                k = rng.randint(top + 1, MAX_MOVES)
            record = make_record(f"warm|{seed}|{index}", size, k)
            prompt = self.render(record, style)
            text = prompt if isinstance(prompt, str) else "".join(m["content"] for m in prompt)
            pairs.append((text, self.reference_completion(record, style)))
        return pairs

    def warm_start_recipe(self) -> dict[str, Any]:
        return {"warm_start_max_moves": self.options.warm_start_max_moves, "warm_start_long_share": self.options.warm_start_long_share}

    def tiny_vocabulary(self, style: str) -> list[str] | None:
        if style != "compact":
            return None
        cells = [f"{r}_{c}" for r in range(MAX_SIZE) for c in range(MAX_SIZE)]
        return [f"G{s}" for s in range(MIN_SIZE, MAX_SIZE + 1)] + list(MOVES) + ["="] + cells


def solve(record: Mapping[str, Any]) -> list[list[int]]:
    """The cells visited, recomputed from the start and the moves (never read from the record)."""
    row, col = record["start"]
    path = []
    for move in record["moves"]:
        row, col = row + MOVES[move][0], col + MOVES[move][1]
        path.append([row, col])
    return path


_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_CELL = re.compile(r"^(\d{1,2})_(\d{1,2})$")


class GridWalkValidator(Validator):
    name: ClassVar[str] = TASK_NAME
    failure_types: ClassVar[tuple[str, ...]] = ("parse", "length", "wrong")

    def score(self, record: Mapping[str, Any], response: str) -> Verdict:
        matches = _ANSWER.findall(response[-20_000:])
        if not matches:
            return Verdict(False, False, "parse", ("parse",))
        words = matches[-1].split()
        cells = [_CELL.match(w) for w in words]
        if not words or any(c is None for c in cells):
            return Verdict(False, False, "parse", ("parse",))
        answer = [[int(c.group(1)), int(c.group(2))] for c in cells]  # type: ignore[union-attr]
        truth = solve(record)
        if len(answer) != len(truth):
            return Verdict(False, False, "length", ("length",))
        if answer != truth:
            return Verdict(False, False, "wrong", ("wrong",))
        return Verdict(True, True, None, ())


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


@hookimpl
def register_generators(register):
    register(GridWalkGenerator)


@hookimpl
def register_validators(register):
    register(GridWalkValidator)


@hookimpl
def register_benchmarks(register):
    sums = read_checksums(FOLDER)
    register(Benchmark(
        name=VALIDATION, task=TASK_NAME, path=FOLDER / f"{VALIDATION}.jsonl", sha256=sums.get(f"{VALIDATION}.jsonl", ""),
        description=f"grid-walk validation set: k = 3-8 moves x grid 3-7, {VALIDATION_PER_CELL} walks each (the engineers' evidence)",
        build=SETS[VALIDATION], label="validation",
    ))
    register(Benchmark(
        name=TARGET, task=TASK_NAME, path=FOLDER / f"{TARGET}.jsonl", sha256=sums.get(f"{TARGET}.jsonl", ""),
        description=f"grid-walk held-out target: unseen walks of the trained lengths k = 9 and 10 x grid 3-7, {TARGET_PER_CELL} walks each "
                    "(no engineer reads it; k9 and k10 are training groups)",
        build=SETS[TARGET], label="target",
    ))
    register(Benchmark(
        name=BEYOND, task=TASK_NAME, path=FOLDER / f"{BEYOND}.jsonl", sha256=sums.get(f"{BEYOND}.jsonl", ""),
        description=f"grid-walk never-trained target: k = 11 and 12 moves x grid 3-7, {BEYOND_PER_CELL} walks each "
                    "(no knob table holds these lengths and no warm start draws them: no run trains on them)",
        build=SETS[BEYOND], label="beyond",
    ))
