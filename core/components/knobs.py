"""A generator's declared knobs at work: values on their grid, shares that sum to 1, and the
default projection of an untrusted proposal.

:class:`envengineer.components.declarations.Knob` declares a knob (and keeps a value on its grid); the
baselines, the H context module and :meth:`Generator.project`'s default read the declaration
through the helpers here, so a task family writes only what is specific to it. Nothing here
raises on a proposal.

The layering: :mod:`envengineer.components.declarations` (the value types) <- this module (functions on them
and on configs) <- :mod:`envengineer.components` (the base classes, whose defaults call these).
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Mapping
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ValidationError

from envengineer.components.declarations import Change, Knob, Projection, _decimals, _on_grid


class _Generator(Protocol):
    """What the helpers here read of a generator: :class:`envengineer.components.Generator` has it
    all and calls them (this module sits below it and does not import it)."""

    name: ClassVar[str]
    config_model: ClassVar[type[BaseModel]]
    knob_table: ClassVar[str | None]
    knobs: ClassVar[tuple[Knob, ...]]

    def default_config(self) -> BaseModel: ...

    def share_knob(self) -> Knob | None: ...

    def knob_proposal(self, values: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]: ...


# ------------------------------------------------------------------- one knob


def snap(knob: Knob, value: float) -> float | int:
    """``value`` clipped into ``[low, high]`` and put on the knob's step (an int for integer knobs): :meth:`Knob.snap`."""
    return knob.snap(value)


def shift(knob: Knob, value: float, delta: float) -> float | int:
    """``value`` moved by ``delta`` on the knob's grid, by at least one step when ``delta`` is not 0: :meth:`Knob.shift`."""
    return knob.shift(value, delta)


def toward(knob: Knob, value: float, harder: bool, amount: float) -> float | int:
    """``value`` moved ``amount`` (knob units, at least one step) toward the hard end, or toward the easy end."""
    if knob.harder == "none":
        return snap(knob, value)
    up = (knob.harder == "up") == harder
    return shift(knob, value, amount if up else -amount)


def number(value: Any) -> float | None:
    """A finite float from a number or a numeric string ('0.3', '30%'); None otherwise."""
    if isinstance(value, bool):
        return None
    try:
        if isinstance(value, (int, float)):
            result = float(value)
        elif isinstance(value, str) and len(value) <= 32:
            text = value.strip()
            scale = 1.0
            if text.endswith("%"):
                text, scale = text[:-1].strip(), 0.01
            result = float(text) * scale
        else:
            return None
    except (ValueError, OverflowError):
        return None
    return result if math.isfinite(result) else None


# ------------------------------------------------------------------ the config


def _dump(config: BaseModel | Mapping[str, Any] | None) -> dict[str, Any]:
    if isinstance(config, BaseModel):
        return config.model_dump()
    return dict(config or {})


def knob_values(generator: _Generator, config: BaseModel | Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{group: {knob: value}}`` of the declared knobs in the config's knob table, in table order."""
    table = generator.knob_table
    if table is None:
        return {}
    groups = _dump(config).get(table)
    if not isinstance(groups, Mapping):
        return {}
    names = [knob.name for knob in generator.knobs]
    result: dict[str, dict[str, Any]] = {}
    for group, values in groups.items():
        values = _dump(values) if isinstance(values, (BaseModel, Mapping)) else {}
        result[str(group)] = {name: values[name] for name in names if name in values}
    return result


#: The one group of a task without a knob table (its declared knobs are top-level fields of the config).
WHOLE = "all"


def knob_rows(generator: _Generator, config: BaseModel | Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{group: {knob: value}}`` of the declared knobs in ``config``: the knob table's groups (:func:`knob_values`),
    or, for a task without a table, one group :data:`WHOLE` holding its top-level knobs ({} when it holds none).
    The one definition of the rows the engineers' rules and the lifecycle payloads read."""
    if generator.knob_table is not None:
        return knob_values(generator, config)
    data = _dump(config)
    top = {knob.name: data[knob.name] for knob in generator.knobs if knob.name in data}
    return {WHOLE: top} if top else {}


def default_config(generator: _Generator) -> BaseModel:
    """The config model built from its field defaults."""
    model = generator.config_model
    try:
        return model()
    except ValidationError as exc:
        missing = ", ".join(".".join(map(str, e["loc"])) for e in exc.errors()) or str(exc)
        raise TypeError(
            f"task {generator.name!r}: {model.__name__} has fields without defaults ({missing}); "
            "give them defaults or override default_config()"
        ) from None


def random_config(generator: _Generator, seed: int) -> BaseModel:
    """The default config with every declared knob drawn within its bounds (shares renormalised)."""
    rng = random.Random(f"{generator.name}|random-config|{seed}")
    base = generator.default_config()
    proposal: dict[str, dict[str, Any]] = {}
    for group, values in knob_values(generator, base).items():
        drawn: dict[str, Any] = {}
        for knob in generator.knobs:
            if knob.name not in values:
                continue
            if knob.share:
                drawn[knob.name] = rng.uniform(0.2, 1.0)
            elif knob.integer:
                drawn[knob.name] = snap(knob, rng.randint(int(knob.low), int(knob.high)))
            else:
                drawn[knob.name] = snap(knob, rng.uniform(knob.low, knob.high))
        proposal[group] = drawn
    if generator.knob_table is None:
        top = {knob.name: snap(knob, rng.uniform(knob.low, knob.high)) for knob in generator.knobs if not knob.share}
        return _drawn(generator, project(generator, top, base), seed)
    share = generator.share_knob()
    if share is not None:
        weights = {g: v[share.name] for g, v in proposal.items() if share.name in v}
        for group, value in renormalize(weights, share).items():
            proposal[group][share.name] = value
    return _drawn(generator, project(generator, generator.knob_proposal(proposal), base), seed)


def _drawn(generator: _Generator, projection: Projection, seed: int) -> BaseModel:
    """The random config's projection, or a ``RegistrationError`` when part of the draw was dropped (a knob
    that is no field of the config, bounds beyond the field's constraints): never the default config
    in silence."""
    from envengineer.errors import RegistrationError

    dropped = [change for change in projection.changes if change.applied is None]
    if dropped:
        first = dropped[0]
        raise RegistrationError(
            f"task {generator.name!r}: random_config({seed}) drew a config that does not validate: "
            f"{first.field}: {first.reason} ({len(dropped)} problem{'s' if len(dropped) != 1 else ''}); "
            "check the declared knobs against the config model (envengineer.testing.check_knob_declarations)"
        )
    return projection.config


# ------------------------------------------------------------------- shares


def _fill(weights: Mapping[str, float], total: float, low: float, high: float) -> dict[str, float]:
    """``clip(c * w, low, high)`` summing to ``total`` (bisection on c); equal weights when all are 0."""
    names = list(weights)
    w = {name: max(0.0, weights[name]) for name in names}
    if not any(w.values()):
        w = {name: 1.0 for name in names}
    lo, hi = 0.0, 1.0
    while sum(min(high, max(low, hi * w[n])) for n in names) < total and hi < 1e300:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if sum(min(high, max(low, mid * w[n])) for n in names) < total:
            lo = mid
        else:
            hi = mid
    return {name: min(high, max(low, hi * w[name])) for name in names}


def split_budget(shares: Mapping[str, float], n: int) -> dict[str, int]:
    """``n`` instances split by ``shares`` (normalised; negative shares count as 0): floors of each
    exact share, then one more to the largest remainders (ties in the mapping's order). Deterministic."""
    total = sum(max(0.0, s) for s in shares.values()) or 1.0
    exact = {name: n * max(0.0, s) / total for name, s in shares.items()}
    result = {name: int(math.floor(v)) for name, v in exact.items()}
    order = sorted(exact, key=lambda name: -(exact[name] - result[name]))
    for name in order[: n - sum(result.values())]:
        result[name] += 1
    return result


def share_bounds(knob: Knob, n: int) -> tuple[float, float]:
    """The bounds ``n`` shares can keep while summing to 1: the knob's, narrowed to 1/n where they cannot."""
    low = knob.low if n * knob.low <= 1.0 else 1.0 / n
    high = knob.high if n * knob.high >= 1.0 else 1.0 / n
    return low, high


def renormalize(values: Mapping[str, float], knob: Knob, pinned: Collection[str] = ()) -> dict[str, float]:
    """Shares within the knob's bounds that sum to 1, on its step.

    ``pinned`` shares (the ones the engineer set) keep their values when the others can absorb
    the difference within the bounds; only when they cannot are all of them scaled together,
    so "raise one share" lowers the others instead of diluting the raise.
    """
    names = list(values)
    if not names:
        return {}
    low, high = share_bounds(knob, len(names))
    clipped = {name: min(high, max(low, float(values[name]))) for name in names}
    rest = [name for name in names if name not in pinned]
    fixed = 1.0 - sum(clipped[name] for name in names if name in pinned)
    if pinned and rest and len(rest) * low - 1e-12 <= fixed <= len(rest) * high + 1e-12:
        result = {**clipped, **_fill({name: clipped[name] for name in rest}, fixed, low, high)}
    elif pinned and not rest and abs(fixed) <= 1e-9:
        result = clipped
    else:
        result = _fill(clipped, 1.0, low, high)
    snapped = {name: float(_on_grid(knob, min(high, max(low, result[name])))) for name in names}
    residual = 1.0 - sum(snapped.values())
    if abs(residual) > 1e-12:
        adjustable = [name for name in (rest or names) if low - 1e-12 <= snapped[name] + residual <= high + 1e-12] or rest or names
        largest = max(adjustable, key=lambda name: (snapped[name], name))
        d = _decimals(knob.step)
        snapped[largest] = round(snapped[largest] + residual, d + 2) if d is not None else snapped[largest] + residual
    return snapped


# -------------------------------------------------------------- the projection


def _short(value: Any, limit: int = 80) -> Any:
    """Keep reports small: long or nested values are shown truncated."""
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    try:
        text = value if isinstance(value, str) else repr(value)
    except Exception:  # a hostile __repr__
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _bounds(knob: Knob) -> str:
    return f"[{knob.low:g}, {knob.high:g}]"


def project(generator: _Generator, proposal: Any, current: BaseModel | Mapping[str, Any]) -> Projection:
    """The default :meth:`Generator.project`: see its docstring. Never raises on any proposal."""
    model = generator.config_model
    base = current if isinstance(current, model) else model.model_validate(_dump(current))
    try:
        return _project(generator, proposal, base)
    except Exception as exc:  # a safety net: the projection's contract is to never raise
        reason = f"could not be projected ({type(exc).__name__}: {_short(str(exc))}); kept the current config"
        return Projection(config=base, changes=(Change("<proposal>", _short(proposal), None, reason),))


def _project(generator: _Generator, proposal: Any, current: BaseModel) -> Projection:
    model = generator.config_model
    merged = current.model_dump()
    changes: list[Change] = []
    accepted: list[str] = []
    declared = {knob.name: knob for knob in generator.knobs}
    table = generator.knob_table
    share = generator.share_knob() if table is not None else None
    proposed_share: dict[str, float] = {}  # group -> the share proposed (as a number)
    proposed_raw: dict[str, Any] = {}  # group -> the share as the proposal wrote it

    if proposal is None:
        proposal = {}
    if not isinstance(proposal, Mapping):
        changes.append(Change("<proposal>", _short(proposal), None, "not a mapping of fields; kept the current config"))
        proposal = {}

    def set_knob(target: dict[str, Any], where: str, name: str, raw: Any, group: str | None) -> None:
        knob = declared.get(name)
        if knob is None or (table is None) != (group is None):
            names = ", ".join(declared) or "none"
            changes.append(Change(where, _short(raw), None, f"unknown knob; only {names} can change"))
            return
        value = number(raw)
        if value is None:
            changes.append(Change(where, _short(raw), target.get(name), "not a finite number; kept the current value"))
            return
        applied = snap(knob, value)
        target[name] = applied
        if knob.share and group is not None:
            proposed_share[group], proposed_raw[group] = value, raw
            return
        off = abs(applied - value)
        if off > (0 if knob.integer else knob.step / 2 + 1e-12):
            if knob.low <= value <= knob.high:
                reason = f"put on the knob's step {knob.step:g}"
            else:
                reason = f"outside {_bounds(knob)}; clipped"
            changes.append(Change(where, _short(raw), applied, reason))
        else:
            accepted.append(where)

    others: dict[str, Any] = {}
    for key, value in proposal.items():
        name = str(key)
        if name not in model.model_fields:
            changes.append(Change(name, _short(value), None, "unknown field; ignored"))
        elif name == table:
            if not isinstance(value, Mapping):
                changes.append(Change(name, _short(value), None, "not a mapping of groups; ignored"))
                continue
            groups = merged.get(table)
            for group, knobs in value.items():
                where = f"{table}.{group}"
                if not isinstance(groups, dict) or str(group) not in groups:
                    known = ", ".join(map(str, groups or {}))
                    changes.append(Change(where, _short(knobs), None, f"unknown group (groups: {known}); ignored"))
                elif not isinstance(knobs, Mapping):
                    changes.append(Change(where, _short(knobs), None, "not a mapping of knobs; ignored"))
                else:
                    for knob_name, raw in knobs.items():
                        set_knob(groups[str(group)], f"{where}.{knob_name}", str(knob_name), raw, str(group))
        elif table is None and name in declared:
            set_knob(merged, name, name, value, None)
        else:
            others[name] = value

    for name, value in others.items():
        try:
            model.model_validate({**merged, name: value})
        except ValidationError as exc:
            first = exc.errors()[0] if exc.errors() else {"msg": str(exc)}
            changes.append(Change(name, _short(value), _short(merged.get(name)), f"invalid ({_short(first.get('msg'))}); kept the current value"))
            continue
        merged[name] = value
        accepted.append(name)

    if share is not None and isinstance(merged.get(table), dict):
        groups = merged[table]
        before = {g: float(v[share.name]) for g, v in groups.items() if isinstance(v, dict) and number(v.get(share.name)) is not None}
        settled = not proposed_share and all(share.low <= v <= share.high for v in before.values()) and abs(sum(before.values()) - 1.0) <= 1e-6
        after = before if settled else renormalize(before, share, pinned=tuple(proposed_share))
        tolerance = share.step / 2 + 1e-12
        for group, value in after.items():
            where = f"{table}.{group}.{share.name}"
            if group in proposed_share:
                wanted = proposed_share[group]
                if abs(value - wanted) <= tolerance:
                    accepted.append(where)
                elif not share.low <= wanted <= share.high:
                    changes.append(Change(where, _short(proposed_raw[group]), value, f"outside {_bounds(share)}; clipped, and the shares renormalised to sum to 1"))
                else:
                    changes.append(Change(where, _short(proposed_raw[group]), value, "renormalised so the shares sum to 1 (the budget is fixed)"))
            elif abs(value - before[group]) > tolerance:
                changes.append(Change(where, before[group], value, "renormalised so the shares sum to 1 (the budget is fixed)"))
            groups[group][share.name] = value

    try:
        config = model.model_validate(merged)
    except ValidationError as exc:
        first = exc.errors()[0] if exc.errors() else {"msg": str(exc)}
        where = ".".join(map(str, first.get("loc", ()))) or "<config>"
        reason = f"the projected config is invalid ({_short(first.get('msg'))}); kept the current config"
        return Projection(config=current, changes=(*changes, Change(where, None, None, reason)))
    return Projection(config=config, changes=tuple(changes), accepted=tuple(accepted))
