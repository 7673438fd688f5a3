"""The knob table and its declarations: per dataset a budget share (``ratio``) and its curriculum levels, each
an integer from 0 to the dataset's cap (catalogue.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from envengineer.api import Knob
from envengineer.tasks.reasoning_gym.catalogue import CATALOGUE, DEFAULT_DATASETS, attributes, refusal


def check_datasets(names: list[str]) -> list[str]:
    unknown = [name for name in names if name not in CATALOGUE]
    if unknown:
        raise ValueError(refusal(unknown))
    if not names:
        raise ValueError("at least one dataset")
    if len(set(names)) != len(names):
        raise ValueError("a dataset is named twice")
    return names


class DatasetLevels(BaseModel):
    """One dataset's budget share and curriculum levels (the attributes are extra fields: ``dist: 1``)."""

    model_config = ConfigDict(extra="allow")

    ratio: float = Field(ge=0, le=1, description="share of the round's budget")

    @model_validator(mode="after")
    def _levels_are_whole(self) -> DatasetLevels:
        for key, value in (self.model_extra or {}).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"level {key} must be a whole number >= 0, not {value!r}")
        return self


class RGConfig(BaseModel):
    """The config the engineer edits: per dataset a ``ratio`` and its curriculum levels."""

    model_config = ConfigDict(extra="forbid")

    datasets: dict[str, DatasetLevels] = Field(default_factory=lambda: default_table(DEFAULT_DATASETS))

    @model_validator(mode="after")
    def _in_catalogue(self) -> RGConfig:
        check_datasets(list(self.datasets))
        for name, entry in self.datasets.items():
            levels = dict(entry.model_extra or {})
            expected = attributes(name)
            if set(levels) != set(expected):
                raise ValueError(f"{name}: levels must be exactly {', '.join(expected)} (got {', '.join(levels) or 'none'})")
            for attr, level in levels.items():
                cap = CATALOGUE[name].caps[attr]
                if level > cap:
                    raise ValueError(f"{name}.{attr} = {level} is above its cap {cap}")
        return self


def default_table(names: tuple[str, ...] | list[str]) -> dict[str, DatasetLevels]:
    """Equal shares, every level 0."""
    return {name: DatasetLevels(ratio=1 / len(names), **{attr: 0 for attr in attributes(name)}) for name in names}


def levels_of(entry: Mapping[str, Any]) -> dict[str, int]:
    """The curriculum levels of one dataset's config row (every field but ``ratio``)."""
    return {key: int(value) for key, value in entry.items() if key != "ratio"}


def knobs_for(names: tuple[str, ...] | list[str]) -> tuple[Knob, ...]:
    """The ratio, then one integer knob per attribute name over ``names`` (high: the loosest cap; each dataset's own cap is
    enforced by project())."""
    knobs = [Knob("ratio", 0.01, 1.0, 0.0001, share=True, description="share of the round's budget")]
    seen: dict[str, list[str]] = {}
    for name in names:
        for attr in attributes(name):
            seen.setdefault(attr, []).append(name)
    for attr, owners in seen.items():
        cap = max(CATALOGUE[o].caps[attr] for o in owners)
        caps = ", ".join(f"{o} 0-{CATALOGUE[o].caps[attr]}" for o in owners)
        knobs.append(Knob(attr, 0, max(cap, 0), 1, integer=True, harder="up", description=f"curriculum level ({caps})"))
    return tuple(knobs)
