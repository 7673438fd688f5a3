"""What a trainer saw of each training prompt while it trained, as ``rollouts.jsonl`` lines.

Shared by the ``trl`` and ``verl`` trainers so both count the same way: a prompt's ``samples``,
``valid`` and ``score`` cover every completion scored for it (a prefilter's samples, then each
GRPO group), ``groups`` holds the GRPO groups' rewards, and ``kept`` says whether a GRPO group
of it was scored (with both trainers, a scored group always reaches an optimizer step).

:class:`Groups` collects GRPO outcomes as reward functions see them; :func:`prompt_line` turns
one prompt's outcomes into a line (:func:`envengineer.loop.signal.rollout_line`). Kept free of heavy
imports: verl's reward workers import it through ``verl_data``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from envengineer.api import rollout_line

#: one GRPO group: each completion's (reward, valid)
Group = list[tuple[float, bool]]


def chunks(items: Sequence[tuple[float, bool]], size: int) -> list[Group]:
    """``items`` cut into groups of ``size`` in order (a last short one stays: it was scored too)."""
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


class Groups:
    """GRPO outcomes per prompt key, cut into groups of ``size`` (the group size, num_generations).

    :meth:`add` takes one reward call's completions (TRL scores a whole generation batch at once,
    ``size`` completions of a prompt in a row), so a prompt sampled in several rollouts gets one
    group per rollout."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size: a group holds at least one completion, got {size}")
        self.size = size
        self.by_key: dict[Hashable, list[Group]] = {}

    def add(self, keys: Iterable[Hashable], rewards: Iterable[float], valid: Iterable[bool]) -> None:
        call: dict[Hashable, list[tuple[float, bool]]] = {}
        for key, reward, ok in zip(keys, rewards, valid, strict=True):
            call.setdefault(key, []).append((float(reward), bool(ok)))
        for key, items in call.items():
            self.by_key.setdefault(key, []).extend(chunks(items, self.size))

    def of(self, key: Hashable) -> list[Group]:
        return self.by_key.get(key, [])

    def prompts(self) -> int:
        """Prompts with at least one group scored."""
        return sum(bool(groups) for groups in self.by_key.values())


def prompt_line(id: str, groups: Sequence[Group] = (), prefilter: tuple[Sequence[float], Sequence[bool]] | None = None) -> dict[str, Any]:
    """One prompt's line: the prefilter's samples (rewards, validity) and its GRPO groups; kept when a group was scored."""
    rewards = [float(r) for r in (prefilter[0] if prefilter else ())]
    valid = [bool(v) for v in (prefilter[1] if prefilter else ())]
    for group in groups:
        rewards += [reward for reward, _ in group]
        valid += [ok for _, ok in group]
    return rollout_line(id, rewards, valid, kept=bool(groups), groups=[[reward for reward, _ in group] for group in groups])
