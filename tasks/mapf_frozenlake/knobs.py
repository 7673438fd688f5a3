"""The knob table and its declarations: one ``ratio``, ``hole_ratio`` and ``wait_ratio`` per map size, and,
with the task option ``agents_range`` (off by default), an ``agents`` count per size too
(:func:`agents_config_model`).

Configs a user writes are checked strictly (unknown keys, missing sizes, ratios that
do not sum to 1 are errors naming the field). What an engineer proposes is untrusted
and goes through :mod:`projection` instead, which never fails.
"""

from __future__ import annotations

import math
import random
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from envengineer.api import Knob
from envengineer.tasks.mapf_frozenlake import SIZE_NAMES, SIZES
from envengineer.tasks.mapf_frozenlake.shares import RATIO_FLOOR  # every size keeps at least this share ("all eight sizes stay")

#: Holes never cover more than this share of a map.
HOLE_RATIO_MAX = 0.5
RATIO_TOLERANCE = 1e-6
#: The agent counts the optional per-size ``agents`` knob may take: a WAIT needs two agents, and the
#: compact prompt style names agents S1 to S8.
AGENTS_KNOB_MIN = 2
AGENTS_KNOB_MAX = 8


def hole_count(size: int, hole_ratio: float) -> int:
    """Holes on an N×N map: the ratio times N², rounded half up."""
    return int(math.floor(hole_ratio * size * size + 0.5))


def min_free_cells(agents: int) -> int:
    """Distinct starts, distinct goals, no agent on its own goal: at least k + 1 free cells."""
    return agents + 1


def fit_free_cells(agents: int) -> int:
    """Free cells a map keeps for ``k`` agents to fit: ``2k + 1``, room to draw distinct starts and
    distinct goals (the benchmarks' rule, and the agents knob's), not only the :func:`min_free_cells`."""
    return 2 * agents + 1


def sizes_fitting(agents: int, hole_ratio: float) -> tuple[int, ...]:
    """Map sizes that leave :func:`fit_free_cells` for ``k`` agents at ``hole_ratio``."""
    return tuple(n for n in SIZES if n * n - hole_count(n, hole_ratio) >= fit_free_cells(agents))


def agents_fitting(size: int, hole_ratio: float) -> int:
    """The most agents an N×N map at ``hole_ratio`` fits (:func:`fit_free_cells`)."""
    return (size * size - hole_count(size, hole_ratio) - 1) // 2


def max_hole_ratio_fitting(size: int, agents: int) -> float:
    """The largest hole_ratio at which an N×N map still fits ``k`` agents (:func:`fit_free_cells`),
    at most HOLE_RATIO_MAX; negative when even an empty map does not fit them."""
    cells = size * size
    return min(HOLE_RATIO_MAX, (cells - fit_free_cells(agents)) / cells)


def max_hole_ratio(size: int, agents: int) -> float:
    """The largest hole_ratio for which the map keeps :func:`min_free_cells` (≤ HOLE_RATIO_MAX).

    Negative when even an empty map is too small for the agent count.
    """
    cells = size * size
    return min(HOLE_RATIO_MAX, (cells - min_free_cells(agents)) / cells)


class SizeKnobs(BaseModel):
    """Knobs for one map size."""

    model_config = ConfigDict(extra="forbid")

    ratio: float = Field(ge=0.0, le=1.0, description="share of the round's training budget at this size")
    hole_ratio: float = Field(ge=0.0, le=HOLE_RATIO_MAX, description="fraction of the N×N cells that are holes")
    wait_ratio: float = Field(ge=0.0, le=1.0, description="fraction of instances whose optimum needs a WAIT")

    @field_validator("ratio", "hole_ratio", "wait_ratio")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value


#: The knobs of each size's row (the knob table ``sizes``). Steps: the projection keeps four decimals.
#: hole_ratio's exact ceiling depends on the size and the agent count (:func:`max_hole_ratio`); project() enforces it.
KNOBS: tuple[Knob, ...] = (
    Knob("ratio", RATIO_FLOOR, 1.0, 0.0001, share=True, description="share of the round's training budget at this size"),
    Knob("hole_ratio", 0.0, HOLE_RATIO_MAX, 0.0001, harder="up", description="fraction of the N×N cells that are holes"),
    Knob("wait_ratio", 0.0, 1.0, 0.0001, harder="up", practices=("conflict",),
         description="fraction of instances whose optimum needs a WAIT (agents must coordinate)"),
)


class MapfConfig(BaseModel):
    """The generator configuration C_n of one round."""

    model_config = ConfigDict(extra="forbid")

    sizes: dict[str, SizeKnobs]

    @field_validator("sizes", mode="before")
    @classmethod
    def _size_keys(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        normalized: dict[str, Any] = {}
        for key, knobs in value.items():
            name = normalize_size_key(key)
            if name is None:
                raise ValueError(f"unknown map size {key!r} (expected one of {', '.join(SIZE_NAMES)})")
            normalized[name] = knobs
        return normalized

    @model_validator(mode="after")
    def _complete(self) -> "MapfConfig":
        missing = [name for name in SIZE_NAMES if name not in self.sizes]
        if missing:
            raise ValueError(f"every map size must be present; missing: {', '.join(missing)}")
        self.sizes = {name: self.sizes[name] for name in SIZE_NAMES}
        total = sum(k.ratio for k in self.sizes.values())
        if abs(total - 1.0) > RATIO_TOLERANCE:
            raise ValueError(f"the ratios must sum to 1 (they sum to {total:.6g})")
        return self

    def knobs(self, size: int) -> SizeKnobs:
        return self.sizes[f"{size}x{size}"]

    def to_yaml_dict(self) -> dict[str, Any]:
        return {"sizes": {name: k.model_dump() for name, k in self.sizes.items()}}


@lru_cache(maxsize=None)
def agents_config_model(default: int) -> type[MapfConfig]:
    """The config model when the agents knob is on: every size also has ``agents``, ``default``
    when a config leaves it out, and must fit it (:func:`fit_free_cells`; the error names
    ``sizes.NxN.agents``). One class per default, so equal options give equal models."""

    class SizeKnobsWithAgents(SizeKnobs):
        """Knobs for one map size, with its agent count."""

        agents: int = Field(
            default, ge=AGENTS_KNOB_MIN, le=AGENTS_KNOB_MAX,
            description="agents in each of this size's instances (the map keeps 2k + 1 free cells for k agents)",
        )

    class MapfAgentsConfig(MapfConfig):
        """The generator configuration C_n of one round, with an agent count per size."""

        sizes: dict[str, SizeKnobsWithAgents]

        @model_validator(mode="after")
        def _agents_fit(self) -> "MapfAgentsConfig":
            for name, knobs in self.sizes.items():
                size = int(name.split("x")[0])
                free = size * size - hole_count(size, knobs.hole_ratio)
                if free < fit_free_cells(knobs.agents):
                    raise ValueError(
                        f"sizes.{name}.agents: {knobs.agents} agents need {fit_free_cells(knobs.agents)} free cells "
                        f"(2k + 1); a {name} map with hole_ratio {knobs.hole_ratio:g} keeps {free}, room for "
                        f"{agents_fitting(size, knobs.hole_ratio)} agents: lower agents or hole_ratio"
                    )
            return self

    return MapfAgentsConfig


def normalize_size_key(key: Any) -> str | None:
    """'6x6', '6X6', '6×6', '6' and 6 all name the 6x6 size; anything else is None."""
    if isinstance(key, bool):
        return None
    if isinstance(key, int):
        return f"{key}x{key}" if key in SIZES else None
    if not isinstance(key, str):
        return None
    text = key.strip().lower().replace("×", "x").replace(" ", "")
    if not text.isascii():  # '²'.isdigit() is True but int('²') fails
        return None
    if text.isdigit():
        n = int(text)
        return f"{n}x{n}" if n in SIZES else None
    parts = text.split("x")
    if len(parts) == 2 and parts[0] == parts[1] and parts[0].isdigit() and int(parts[0]) in SIZES:
        return f"{int(parts[0])}x{int(parts[0])}"
    return None


def uniform_config(hole_ratio: float | dict[int, float] | None = None, wait_ratio: float = 0.3) -> MapfConfig:
    """Equal ratios; hole_ratio growing from 0.1 (3x3) to 0.2 (10x10) unless given."""
    sizes = {}
    for i, n in enumerate(SIZES):
        if hole_ratio is None:
            hr = round(0.1 + 0.1 * i / (len(SIZES) - 1), 2)
        elif isinstance(hole_ratio, dict):
            hr = hole_ratio[n]
        else:
            hr = hole_ratio
        sizes[f"{n}x{n}"] = SizeKnobs(ratio=1 / len(SIZES), hole_ratio=hr, wait_ratio=wait_ratio)
    return MapfConfig(sizes=sizes)


def random_config(seed: int, agents: int = 2) -> MapfConfig:
    """A random config in the feasible region (the paper's random round-0 start)."""
    rng = random.Random(f"mapf-frozenlake-random-config-{seed}")
    weights = [rng.uniform(0.2, 1.0) for _ in SIZES]
    total = sum(weights)
    ratios = [round(w / total, 4) for w in weights]
    ratios[-1] = round(1.0 - sum(ratios[:-1]), 4)
    sizes = {}
    for n, ratio in zip(SIZES, ratios):
        sizes[f"{n}x{n}"] = SizeKnobs(
            ratio=ratio,
            hole_ratio=round(rng.uniform(0.0, min(0.35, max_hole_ratio(n, agents))), 3),
            wait_ratio=round(rng.uniform(0.0, 0.8), 3),
        )
    from envengineer.tasks.mapf_frozenlake.shares import renormalize

    fixed = renormalize({name: k.ratio for name, k in sizes.items()}, RATIO_FLOOR)
    for name, value in fixed.items():
        sizes[name] = sizes[name].model_copy(update={"ratio": value})
    return MapfConfig(sizes=sizes)


def allocate(config: MapfConfig, n: int) -> dict[int, int]:
    """Instances per size for a budget of ``n``: largest remainder on ratio × n (deterministic)."""
    raw = [(size, config.knobs(size).ratio * n) for size in SIZES]
    counts = {size: int(math.floor(x)) for size, x in raw}
    left = n - sum(counts.values())
    order = sorted(raw, key=lambda item: (-(item[1] - math.floor(item[1])), item[0]))
    for size, _ in order[:left]:
        counts[size] += 1
    return counts
