"""The size ratios' arithmetic: shares that sum to 1, each at or above the floor, rounded to 4 decimals.
The config (a random start) and the projection (every design step) both renormalize through it."""

from __future__ import annotations

from collections.abc import Collection, Mapping

#: Every size keeps at least this share of the budget ("all eight sizes stay"); the projection raises a lower one to it.
RATIO_FLOOR = 0.02
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
