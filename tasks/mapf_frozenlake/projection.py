"""Project an engineer's proposal onto the generator's constraints.

The proposal is untrusted: it may be partial, misspelled, out of range, or not even a
mapping. Projection never raises. It merges what it can onto the current config,
clips each knob into its feasible range, keeps every size at or above the ratio floor
and renormalises the ratios to 1, and reports every change it made and every part it
ignored, so the engineer (and the user) can see what was done to the proposal.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from envengineer.components import Change, Projection
from envengineer.knobs import number
from envengineer.tasks.mapf_frozenlake import SIZE_NAMES
from envengineer.tasks.mapf_frozenlake.config import (
    RATIO_FLOOR,
    MapfConfig,
    SizeKnobs,
    max_hole_ratio,
    normalize_size_key,
)

KNOBS = ("ratio", "hole_ratio", "wait_ratio")
DECIMALS = 4


def renormalize(
    ratios: Mapping[str, float], floor: float = RATIO_FLOOR, pinned: Collection[str] = ()
) -> dict[str, float]:
    """Ratios that sum to 1, each ≥ ``floor``, rounded to 4 decimals.

    ``pinned`` ratios (the ones the engineer set) keep their values when the others
    can absorb the difference at or above the floor; only when they cannot is every
    ratio scaled together. This makes "raise one ratio" lower the others, as the
    fixed budget demands, instead of diluting the raise itself.
    """
    names = list(ratios)
    values = {name: max(floor, float(ratios[name])) if name in pinned else max(0.0, float(ratios[name])) for name in names}
    rest = [name for name in names if name not in pinned]
    pinned_total = sum(values[name] for name in names if name in pinned)
    if pinned and rest and pinned_total + floor * len(rest) <= 1.0 + 1e-12:
        filled = _fill({name: values[name] for name in rest}, 1.0 - pinned_total, floor)
        result = {name: filled.get(name, values[name]) for name in names}
    else:
        result = _fill(values, 1.0, floor)
    rounded = {name: round(value, DECIMALS) for name, value in result.items()}
    residual = round(1.0 - sum(rounded.values()), DECIMALS)
    if residual:
        adjustable = rest or names
        largest = max(adjustable, key=lambda name: (rounded[name], name))
        rounded[largest] = round(rounded[largest] + residual, DECIMALS)
    return rounded


def _fill(values: Mapping[str, float], budget: float, floor: float) -> dict[str, float]:
    """Scale ``values`` to sum to ``budget``, raising any below ``floor`` to it (water-filling)."""
    names = list(values)
    fixed: set[str] = set()
    while True:
        free = [name for name in names if name not in fixed]
        left = budget - floor * len(fixed)
        total = sum(values[name] for name in free)
        scaled = {name: (values[name] * left / total if total > 0 else left / len(free)) for name in free}
        low = [name for name in free if scaled[name] < floor - 1e-12]
        if not low or len(low) == len(free):
            return {name: (floor if name in fixed else scaled[name]) for name in names}
        fixed.update(low)


def project(proposal: Any, current: MapfConfig, agents: int = 2) -> Projection:
    """Merge ``proposal`` onto ``current`` and project it; see the module docstring."""
    changes: list[Change] = []
    accepted: list[str] = []
    merged = {name: current.sizes[name].model_dump() for name in SIZE_NAMES}

    if proposal is None:
        proposal = {}
    if not isinstance(proposal, Mapping):
        changes.append(Change("<proposal>", _short(proposal), None, "not a mapping of fields; kept the current config"))
        proposal = {}

    size_updates: dict[str, Any] = {}
    for key, value in proposal.items():
        if key == "sizes":
            if isinstance(value, Mapping):
                for size_key, knobs in value.items():
                    _collect(size_updates, size_key, knobs, f"sizes.{size_key}", changes)
            else:
                changes.append(Change("sizes", _short(value), None, "not a mapping of sizes; ignored"))
        elif normalize_size_key(key) is not None:
            _collect(size_updates, key, value, str(key), changes)
        else:
            changes.append(Change(str(key), _short(value), None, "unknown field; ignored"))

    proposed_ratio: dict[str, float] = {}
    for name, knobs in size_updates.items():
        for knob, raw in knobs.items():
            where = f"sizes.{name}.{knob}"
            if knob not in KNOBS:
                changes.append(Change(where, _short(raw), None, f"unknown knob; only {', '.join(KNOBS)} can change"))
                continue
            value = number(raw)
            if value is None:
                changes.append(Change(where, _short(raw), merged[name][knob], "not a finite number; kept the current value"))
                continue
            merged[name][knob] = value
            if knob == "ratio":
                proposed_ratio[name] = value
            else:
                accepted.append(where)

    # Clip hole_ratio and wait_ratio into their feasible ranges.
    for name in SIZE_NAMES:
        size = int(name.split("x")[0])
        bounds = {"hole_ratio": (0.0, max(0.0, max_hole_ratio(size, agents))), "wait_ratio": (0.0, 1.0)}
        for knob, (low, high) in bounds.items():
            value = merged[name][knob]
            clipped = round(min(high, max(low, value)), DECIMALS)
            if abs(clipped - value) > 10 ** -DECIMALS / 2:
                where = f"sizes.{name}.{knob}"
                if where in accepted:
                    accepted.remove(where)
                changes.append(Change(where, value, clipped, f"outside the feasible range [{low:g}, {high:.4g}]; clipped"))
            merged[name][knob] = clipped

    # Ratios: non-negative, floor, renormalise to 1.
    before = {name: merged[name]["ratio"] for name in SIZE_NAMES}
    after = renormalize(before, pinned=tuple(proposed_ratio))
    for name in SIZE_NAMES:
        where = f"sizes.{name}.ratio"
        if name in proposed_ratio:
            if abs(after[name] - proposed_ratio[name]) <= 10 ** -DECIMALS:
                accepted.append(where)
            else:
                reason = (
                    f"raised to the floor {RATIO_FLOOR:g} (every size stays present)"
                    if after[name] == RATIO_FLOOR and proposed_ratio[name] < RATIO_FLOOR
                    else "renormalised so the ratios sum to 1 (the budget is fixed)"
                )
                changes.append(Change(where, proposed_ratio[name], after[name], reason))
        elif abs(after[name] - before[name]) > 10 ** -DECIMALS:
            changes.append(Change(where, before[name], after[name], "renormalised so the ratios sum to 1 (the budget is fixed)"))
        merged[name]["ratio"] = after[name]

    config = MapfConfig(sizes={name: SizeKnobs(**merged[name]) for name in SIZE_NAMES})
    return Projection(config=config, changes=tuple(changes), accepted=tuple(accepted))


def _collect(updates: dict[str, Any], key: Any, knobs: Any, where: str, changes: list[Change]) -> None:
    name = normalize_size_key(key)
    if name is None:
        changes.append(Change(where, _short(knobs), None, f"unknown map size (sizes are {', '.join(SIZE_NAMES)}); ignored"))
        return
    if not isinstance(knobs, Mapping):
        changes.append(Change(where, _short(knobs), None, "not a mapping of knobs; ignored"))
        return
    updates.setdefault(name, {}).update({str(k): v for k, v in knobs.items()})


def _short(value: Any, limit: int = 80) -> Any:
    """Keep reports small: long or nested values are shown truncated."""
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
