"""The task section of a verifiers run, which declares its knobs: the TasksetConfig fields the engineer may move
(``knobs``, each a :class:`KnobSpec`), the groups and their budget shares (``groups``), and what the family holds
fixed. The knobs themselves (``Knob``s and the per-run config model) are built from it by the generator, once the
taskset's config type is known (:meth:`taskset.Taskset.knob`)."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from envengineer.tasks.verifiers import TASK_NAME

#: The TasksetConfig fields every taskset has (verifiers' SharedTasksetConfig and ``id``): never a knob, a seed,
#: size or group field; ``fixed`` may set ``task`` (the TaskConfig: plugged rewards, judges) and ``system_prompt``.
RESERVED_FIELDS = ("id", "task", "system_prompt")
#: The knob holding each group's share of the round's budget (only with ``groups``).
SHARE = "ratio"


class KnobSpec(BaseModel):
    """One declared knob: a numeric field of the taskset's TasksetConfig."""

    model_config = ConfigDict(extra="forbid")

    range: tuple[float, float] | None = Field(None, description="[low, high] (default: the field's own ge/le)")
    step: float | None = Field(None, gt=0, description="the smallest move (default 1 for an integer field; required for a float)")
    integer: bool | None = Field(None, description="whole values (default: the field is an int)")
    harder: Literal["up", "down", "none"] = Field("none", description="which way makes tasks harder")
    description: str = ""


class GroupSpec(BaseModel):
    """One group per value of a TasksetConfig field (e.g. a sub-task mix), each with its budget share."""

    model_config = ConfigDict(extra="forbid")

    field: str = Field(description="the TasksetConfig field whose values are the groups")
    values: list[Any] = Field(min_length=2, description="the field's values, one group each (names: str(value))")

    @field_validator("values")
    @classmethod
    def _distinct(cls, values: list[Any]) -> list[Any]:
        names = [str(v) for v in values]
        if len(set(names)) != len(names):
            raise ValueError("a group value is named twice")
        return values


class VFOptions(BaseModel):
    """The ``task:`` section of a run config for a verifiers taskset."""

    model_config = ConfigDict(extra="forbid")

    name: Literal["verifiers"] = TASK_NAME
    taskset: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@/-]*$", description="the verifiers taskset id (an importable package exporting its Taskset)")
    seed_field: str | None = Field("seed", description="the TasksetConfig field set from the round's seed (null: none; then shuffle must be on)")
    shuffle: bool = Field(False, description="draw each round's tasks with verifiers' own shuffle(seed) view of a finite taskset (for tasksets without a seed field)")
    size_field: str | None = Field(None, description="the TasksetConfig field set to how many tasks a group needs (null: take them from load()'s stream)")
    knobs: dict[str, KnobSpec] = Field(min_length=1, description="the TasksetConfig fields the engineer may move, with bounds")
    groups: GroupSpec | None = Field(None, description="one group per value of a field, each with its share (default: one group, all)")
    fixed: dict[str, Any] = Field(default_factory=dict, description="other TasksetConfig fields, held for the whole run")
    answer_field: str | None = Field(None, description="the TaskData field holding the reference answer (for reference checks, warm starts, the simulated student)")
    valid_threshold: float = Field(1.0, description="a reply is valid when the taskset's reward reaches this")
    reward_range: tuple[float, float] = Field((0.0, 1.0), description="the taskset reward's [worst, best]: the verdict's score is its place in it")
    allow_judges: bool = Field(False, description="score with the taskset's LLM judges (cost, non-determinism, network at scoring)")
    score_timeout_s: float = Field(10.0, gt=0, le=600, description="seconds one task.score may take (a worker thread)")
    max_answer_chars: int = Field(32_768, ge=1, description="longer replies are refused as too_long before any reward runs")

    @model_validator(mode="after")
    def _consistent(self) -> VFOptions:
        low, high = self.reward_range
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ValueError(f"reward_range: needs finite worst < best, got {list(self.reward_range)}")
        if not math.isfinite(self.valid_threshold):
            raise ValueError("valid_threshold: must be a finite number")
        if self.seed_field is None and not self.shuffle:
            raise ValueError(
                f"seed_field: taskset {self.taskset!r} has no seed field and shuffle is off, so its tasks would not change "
                "with the round: name its seed field, or set shuffle: true for a finite taskset"
            )
        if self.shuffle and self.size_field is not None:
            raise ValueError(
                "size_field: with shuffle, each round draws from the whole of the taskset's load(); a size field set to the "
                "round's count would make that pool exactly the tasks taken, the same every round (leave size_field unset, "
                "or set the pool's size under fixed)"
            )
        roles: dict[str, str] = {}
        for role, names in (("seed_field", [self.seed_field]), ("size_field", [self.size_field]),
                            ("groups.field", [self.groups.field] if self.groups else []), ("knobs", list(self.knobs)),
                            ("fixed", list(self.fixed))):
            for name in names:
                if name is None:
                    continue
                if name == "id" or (name in RESERVED_FIELDS and role != "fixed"):
                    raise ValueError(f"{role}: {name!r} is a field every taskset has ({', '.join(RESERVED_FIELDS)}), not one to set")
                if name in roles:
                    raise ValueError(f"{role}: field {name!r} is already {roles[name]}")
                roles[name] = role
        if SHARE in self.knobs and self.groups:
            raise ValueError(f"knobs: {SHARE!r} is the groups' budget share here; rename nothing, declare another field")
        return self
