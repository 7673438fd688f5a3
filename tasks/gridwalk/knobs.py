"""The knob table and its declarations: per walk length (the groups ``k3`` … ``k10``), a budget share and a grid size."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from envengineer.api import Knob

MIN_MOVES, MAX_MOVES = 3, 10
GROUPS = tuple(f"k{k}" for k in range(MIN_MOVES, MAX_MOVES + 1))
MIN_SIZE, MAX_SIZE, DEFAULT_SIZE = 3, 7, 5
RATIO_FLOOR = 0.01


class GroupKnobs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ratio: float = Field(1 / len(GROUPS), ge=0, le=1, description="share of the round's training budget")
    size: int = Field(DEFAULT_SIZE, ge=MIN_SIZE, le=MAX_SIZE, description="grid side N (an N x N grid)")


class GridWalkConfig(BaseModel):
    """The generator config the engineer rewrites: per walk length, a budget share and a grid size."""

    model_config = ConfigDict(extra="forbid")
    groups: dict[str, GroupKnobs] = Field(default_factory=lambda: {g: GroupKnobs() for g in GROUPS})


def moves_of(group: str) -> int:
    """``k7`` -> 7; ``ValueError`` naming the group otherwise."""
    if not (isinstance(group, str) and re.fullmatch(r"k\d{1,2}", group) and MIN_MOVES <= int(group[1:]) <= MAX_MOVES):
        raise ValueError(f"grid-walk group {group!r}: expected one of {', '.join(GROUPS)}")
    return int(group[1:])


#: The knobs of each walk length's row (the knob table ``groups``).
KNOBS: tuple[Knob, ...] = (
    Knob("ratio", RATIO_FLOOR, 1.0, 0.0001, share=True, description="share of the round's training budget on walks of this length"),
    Knob("size", MIN_SIZE, MAX_SIZE, 1, integer=True, harder="up", description="grid side N: more cells to name, fewer moves blocked by the border"),
)
