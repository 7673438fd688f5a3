"""The reasoning-gym library, reached: its factory (or a ConfigError saying what to install), one item at given
curriculum levels from a seed, what a level draws, and a dataset's scorer. The generator, the compact prompt
style's warm start and the frozen benchmarks all draw items through here."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from envengineer.api import ConfigError
from envengineer.tasks.reasoning_gym import INSTALL_HINT, TASK_NAME
from envengineer.tasks.reasoning_gym.catalogue import CATALOGUE


def rg() -> Any:
    """The reasoning_gym package (its factory module), or a ConfigError saying what to install."""
    try:
        import reasoning_gym  # noqa: F401 - registers the datasets
        from reasoning_gym import factory
    except ImportError:
        raise ConfigError(f"task {TASK_NAME}: the reasoning-gym package is not installed: {INSTALL_HINT}") from None
    return factory


def item_seed(seed: int, dataset: str, index: int) -> int:
    """The reasoning-gym seed of item ``index`` of ``dataset`` in the set seeded ``seed`` (reasoning-gym draws item i from
    Random(seed + i): consecutive seeds would share all but one item; a hash shares none)."""
    digest = hashlib.sha256(f"{TASK_NAME}|{seed}|{dataset}|{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _rg_config(dataset: str, levels: Mapping[str, int], seed: int) -> Any:
    factory = rg()
    curriculum = factory.create_curriculum(dataset)
    for attr, level in levels.items():
        curriculum.set_attr_level(attr, int(level))
    return curriculum.generate_configuration({"seed": seed, "size": 1})


def make_item(dataset: str, levels: Mapping[str, int], seed: int) -> dict[str, Any]:
    """One reasoning-gym item at ``levels``, drawn from Random(seed), as plain JSON."""
    dataset_cls = rg().DATASETS[dataset][0]
    item = dataset_cls(_rg_config(dataset, levels, seed))[0]
    return json.loads(json.dumps({"question": item["question"], "answer": item["answer"], "metadata": item["metadata"]}, ensure_ascii=False))


def level_ranges(dataset: str, attr: str, top: int | None = None) -> list[tuple[Any, Any]]:
    """What ``attr`` of ``dataset`` draws at each level from 0 to ``top`` (default: its cap): the ``(low, high)`` that
    reasoning-gym's curriculum writes into the dataset's configuration at that level (a scalar attribute: ``(v, v)``).

    Not the curriculum's level values: a range attribute at level L draws from the level-0 value to the level-L value,
    or to the level-(L+1) value when it is marked ``ensure_interval`` (gcd's ``value`` at level 0: 100-1000), and such
    an attribute's last level draws what the one below does (:func:`repeated_levels`)."""
    spec = rg().create_curriculum(dataset).attributes[attr]
    top = CATALOGUE[dataset].caps[attr] if top is None else top
    ranges = []
    for level in range(top + 1):
        config = _rg_config(dataset, {attr: level}, 0)
        if hasattr(spec, "lower_field_name"):
            ranges.append((getattr(config, spec.lower_field_name), getattr(config, spec.upper_field_name)))
        else:
            ranges.append((getattr(config, spec.field_name),) * 2)
    return ranges


def repeated_levels(dataset: str, attr: str, top: int | None = None) -> list[int]:
    """The levels of ``attr`` (1 to ``top``, default its cap) whose reasoning-gym configuration equals the level below's:
    they generate exactly the items of the level below, seed for seed."""
    top = CATALOGUE[dataset].caps[attr] if top is None else top
    configs = [_rg_config(dataset, {attr: level}, 0) for level in range(top + 1)]
    return [level for level in range(1, top + 1) if configs[level] == configs[level - 1]]


def describe_levels(dataset: str, attr: str) -> str:
    """Each level of ``attr`` up to its cap with what it draws: ``0: 100–1000, 1: 100–10000, …`` (one number: exactly that
    value), a repeated level marked ``(the same items as level L)``. The guidelines and docs/reasoning-gym.md show it."""
    repeated = set(repeated_levels(dataset, attr))
    parts = []
    for level, (low, high) in enumerate(level_ranges(dataset, attr)):
        drawn = f"{low}" if low == high else f"{low}–{high}"
        parts.append(f"{level}: {drawn}" + (f" (the same items as level {level - 1})" if level in repeated else ""))
    return ", ".join(parts)


@functools.lru_cache(maxsize=256)
def _scorer(dataset: str, levels: tuple[tuple[str, int], ...]) -> Any:
    """The dataset's ``score_answer``, on an instance configured at the record's levels (some scorers read their config)."""
    dataset_cls = rg().DATASETS[dataset][0]
    return dataset_cls(_rg_config(dataset, dict(levels), 0)).score_answer
