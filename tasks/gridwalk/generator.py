"""The grid-walk generator: its task options, groupings, prompts and warm start (the package docstring describes the task)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from envengineer.api import GenerationResult, Generator, Grouping, Knob, split_budget
from envengineer.tasks.gridwalk import TASK_NAME
from envengineer.tasks.gridwalk.benchmarks import BEYOND_MOVES, VALIDATION
from envengineer.tasks.gridwalk.knobs import (
    GROUPS, KNOBS, MAX_MOVES, MAX_SIZE, MIN_MOVES, MIN_SIZE, RATIO_FLOOR, GridWalkConfig, moves_of,
)
from envengineer.tasks.gridwalk.walk import MOVES, cells_text, make_record, solve

STYLES = ("full", "compact")


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
    knobs: ClassVar[tuple[Knob, ...]] = KNOBS
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
