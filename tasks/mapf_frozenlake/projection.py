"""Project an engineer's proposal onto the generator's constraints.

The proposal is untrusted: it may be partial, misspelled, out of range, or not even a
mapping. Projection never raises. It merges what it can onto the current config,
clips each knob into its feasible range, keeps every size at or above the ratio floor
and renormalises the ratios to 1, and reports every change it made and every part it
ignored, so the engineer (and the user) can see what was done to the proposal.

With the agents knob on (``agents_range``), each size's ``agents`` is clipped first, to a
whole count in the range that an empty map of the size fits, and then its hole ratio to
what keeps ``2k + 1`` free cells for those ``k`` agents (:func:`fit_agents`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from envengineer.api import Change, Projection, number
from envengineer.tasks.mapf_frozenlake import SIZE_NAMES
from envengineer.tasks.mapf_frozenlake.knobs import (
    HOLE_RATIO_MAX,
    MapfConfig,
    SizeKnobs,
    agents_fitting,
    fit_free_cells,
    max_hole_ratio,
    max_hole_ratio_fitting,
    normalize_size_key,
)
from envengineer.tasks.mapf_frozenlake.shares import DECIMALS, RATIO_FLOOR, renormalize

KNOBS = ("ratio", "hole_ratio", "wait_ratio")


def fit_agents(value: float, size: int, agents_range: tuple[int, int]) -> tuple[int, str | None]:
    """A size's agent count: ``value`` rounded half up to a whole count, clipped into ``agents_range``
    and to the most an empty N×N map fits, with the reason when that is not ``value`` (None when it is).

    The options keep the range's low end within what the 3x3 map fits; were it not, the map's fit wins."""
    low, high = agents_range
    whole = int(math.floor(value + 0.5))
    top = min(high, agents_fitting(size, 0.0))
    count = min(top, max(low, whole))
    if count == value:
        return count, None
    if whole != value and low <= whole <= top:
        return count, "not a whole number of agents; rounded"
    if not low <= whole <= high:
        return count, f"outside the agents range [{low}, {high}]; clipped"
    return count, f"a {size}x{size} map has room for at most {top} agents ({fit_free_cells(top + 1)} free cells needed for {top + 1}); clipped"


def hole_ratio_ceiling(size: int, agents: int) -> float:
    """The knob-on ceiling of a size's hole_ratio: the map keeps ``2k + 1`` free cells for ``k`` agents."""
    return max(0.0, max_hole_ratio_fitting(size, agents))


def project(proposal: Any, current: MapfConfig, agents: int = 2, agents_range: tuple[int, int] | None = None) -> Projection:
    """Merge ``proposal`` onto ``current`` and project it; see the module docstring.

    ``agents``: the run's agent count (the hole ratio's ceiling keeps ``k + 1`` free cells for it);
    ``agents_range``: the agents knob is on, ``current`` is of its config model
    (:func:`knobs.agents_config_model`) and each size's own count sets its ceiling instead."""
    knob_names = KNOBS if agents_range is None else (*KNOBS, "agents")
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
            if knob not in knob_names:
                changes.append(Change(where, _short(raw), None, f"unknown knob; only {', '.join(knob_names)} can change"))
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

    # Clip the agent count (knob on), then hole_ratio and wait_ratio into their feasible ranges.
    for name in SIZE_NAMES:
        size = int(name.split("x")[0])
        if agents_range is None:
            ceiling = max(0.0, max_hole_ratio(size, agents))
        else:
            value = merged[name]["agents"]
            count, reason = fit_agents(value, size, agents_range)
            if reason is not None:
                where = f"sizes.{name}.agents"
                if where in accepted:
                    accepted.remove(where)
                changes.append(Change(where, value, count, reason))
            merged[name]["agents"] = count
            ceiling = hole_ratio_ceiling(size, count)
        bounds = {"hole_ratio": (0.0, ceiling), "wait_ratio": (0.0, 1.0)}
        for knob, (low, high) in bounds.items():
            value = merged[name][knob]
            clipped = round(min(high, max(low, value)), DECIMALS)
            if abs(clipped - value) > 10 ** -DECIMALS / 2:
                where = f"sizes.{name}.{knob}"
                if where in accepted:
                    accepted.remove(where)
                reason = f"outside the feasible range [{low:g}, {high:.4g}]; clipped"
                if agents_range is not None and knob == "hole_ratio" and high < HOLE_RATIO_MAX:
                    count = merged[name]["agents"]
                    reason += f" ({count} agents need {fit_free_cells(count)} free cells)"
                changes.append(Change(where, value, clipped, reason))
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

    if agents_range is None:
        config = MapfConfig(sizes={name: SizeKnobs(**merged[name]) for name in SIZE_NAMES})
    else:
        config = type(current).model_validate({"sizes": merged})
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
