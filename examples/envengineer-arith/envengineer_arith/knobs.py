"""The knob table and its declarations: per digit group, a budget share and how many addends."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from envengineer.api import Knob

GROUPS = ("1d", "2d", "3d")  # digits per term
MAX_TERMS = 8


class Knobs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ratio: float = Field(1 / len(GROUPS), ge=0, le=1, description="share of the round's budget")
    terms: int = Field(2, ge=2, le=MAX_TERMS, description="addends per instance")


class ArithConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    groups: dict[str, Knobs] = Field(default_factory=lambda: {g: Knobs() for g in GROUPS})


#: The knobs of each digit group's row (the knob table ``groups``).
KNOBS: tuple[Knob, ...] = (
    Knob("ratio", 0.01, 1.0, 0.0001, share=True, description="share of the round's budget"),
    Knob("terms", 2, MAX_TERMS, 1, integer=True, harder="up", description="addends per instance"),
)
