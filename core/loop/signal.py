"""The training signal: how the policy did on the round's own training prompts, while it trained.

A trainer samples every training prompt (a prefilter's samples, then the GRPO groups) and writes
one line per prompt to ``round-NN/train/rollouts.jsonl``::

    {"id": "...", "samples": 16, "valid": 5, "score": 0.31, "kept": true, "groups": [[1, 0, 0, 1, 0, 0, 1, 0]]}

``samples``: completions scored for the prompt; ``valid``: how many of them were valid; ``score``:
their mean reward; ``kept``: whether the prompt reached an optimizer step; ``groups``: the GRPO
groups' rewards each time the prompt was trained on (empty when it never was). This is the
quantity learnability-style curricula ask for (sampled success on the round's own data), as
opposed to greedy validation rates on another distribution.

:func:`aggregate` files the lines by every grouping the task declares (the records give the
groups): prompts, samples, sampled success ``p`` (valid / samples), the share of prompts with
``0 < p < 1`` (mixed: the ones GRPO can learn from), all-right and all-wrong counts, prompts kept,
and GRPO's own rollouts apart from the prefilter's: ``grpo_samples`` (the rewards in ``groups``) and
``grpo_right`` (those of them at least 1: R_acc's 1 for a valid completion, a full score with a graded
reward; an optimality bonus only adds to a valid one). A rule that must not pool a prefilter's samples
with GRPO's reads these two: GRPO's alone, or the prefilter's as every sample less GRPO's (``rlve``'s
accuracy at its ceiling, each prompt counted once).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envengineer.errors import InputError

#: keys of one line of ``rollouts.jsonl`` (``groups`` may be empty)
ROLLOUT_KEYS = ("id", "samples", "valid", "score", "kept", "groups")


def rollout_line(id: str, outcomes: Sequence[float], valid: Sequence[bool], *, kept: bool,
                 groups: Sequence[Sequence[float]] = ()) -> dict[str, Any]:
    """One line of ``rollouts.jsonl`` from a prompt's rewards and validity, every sample it got."""
    n = len(outcomes)
    return {
        "id": str(id), "samples": n, "valid": int(sum(bool(v) for v in valid)),
        "score": round(sum(float(x) for x in outcomes) / n, 6) if n else 0.0,
        "kept": bool(kept), "groups": [[round(float(x), 6) for x in g] for g in groups],
    }


def check_line(line: Any, where: str) -> dict[str, Any]:
    """A rollouts line with the documented keys and types, or :class:`InputError` naming ``where``."""
    if not isinstance(line, Mapping):
        raise InputError(f"{where}: expected a JSON object")
    missing = [k for k in ROLLOUT_KEYS if k not in line]
    if missing:
        raise InputError(f"{where}: missing {', '.join(missing)}")
    samples, valid = line["samples"], line["valid"]
    if not (isinstance(samples, int) and isinstance(valid, int) and 0 <= valid <= samples):
        raise InputError(f"{where}: samples and valid must be counts with 0 <= valid <= samples")
    return dict(line)


@dataclass
class Cell:
    """The signal of a set of prompts (one group, or all of them)."""

    prompts: int = 0
    samples: int = 0
    valid: int = 0
    score_sum: float = 0.0
    mixed: int = 0  # prompts with 0 < p < 1
    all_right: int = 0
    all_wrong: int = 0
    kept: int = 0
    learnability: float = 0.0  # sum over prompts of p (1 - p)
    grpo_samples: int = 0  # GRPO's rollouts alone (the rewards in the lines' groups), without the prefilter's
    grpo_right: int = 0  # ... of them with a reward of at least 1 (a valid completion under R_acc)

    def add(self, line: Mapping[str, Any]) -> None:
        n, v = int(line["samples"]), int(line["valid"])
        self.prompts += 1
        self.kept += bool(line.get("kept"))
        for group in line.get("groups") or ():
            self.grpo_samples += len(group)
            self.grpo_right += sum(float(r) >= 1.0 for r in group)
        if n == 0:
            return
        self.samples += n
        self.valid += v
        self.score_sum += float(line.get("score") or 0.0) * n
        p = v / n
        self.learnability += p * (1 - p)
        if v == 0:
            self.all_wrong += 1
        elif v == n:
            self.all_right += 1
        else:
            self.mixed += 1

    @property
    def success(self) -> float | None:
        """Sampled success: valid completions over completions (None: nothing sampled)."""
        return self.valid / self.samples if self.samples else None

    def to_dict(self) -> dict[str, Any]:
        sampled = self.all_right + self.all_wrong + self.mixed
        return {
            "prompts": self.prompts, "samples": self.samples, "valid": self.valid,
            "success": None if self.success is None else round(self.success, 6),
            "success_se": None if not self.samples else round(math.sqrt(self.success * (1 - self.success) / self.samples), 6),  # type: ignore[operator]
            "mean_score": round(self.score_sum / self.samples, 6) if self.samples else None,
            "mixed_share": round(self.mixed / sampled, 6) if sampled else None,
            "mixed": self.mixed, "all_right": self.all_right, "all_wrong": self.all_wrong,
            "kept": self.kept, "learnability": round(self.learnability, 6),
            "grpo_samples": self.grpo_samples, "grpo_right": self.grpo_right,
        }


@dataclass
class Signal:
    overall: Cell = field(default_factory=Cell)
    by: dict[str, dict[str, Cell]] = field(default_factory=dict)
    unmatched: int = 0  # lines whose id is in none of the round's records

    def to_dict(self) -> dict[str, Any]:
        return {
            "overall": self.overall.to_dict(),
            "by": {dim: {g: c.to_dict() for g, c in groups.items()} for dim, groups in self.by.items()},
            **({"unmatched": self.unmatched} if self.unmatched else {}),
        }


def aggregate(lines: Iterable[Mapping[str, Any]], records: Iterable[Mapping[str, Any]], generator: Any) -> dict[str, Any]:
    """The signal of ``lines`` overall and per group of each of the task's groupings (as evaluation
    files them, groups in the task's order); ``records``: the round's instances, to find each id's groups."""
    from envengineer.loop.evaluation import dimensions, groups_of

    dims = dimensions(generator)
    primary = generator.evaluation_groupings()[0].name
    orders = {g.name: (tuple(generator.groups()) if g.name == primary else tuple(g.order)) for g in dims}
    where = {generator.record_id(r): groups_of(generator, r, dims) for r in records}
    signal = Signal(by={g.name: {} for g in dims})
    for line in lines:
        groups = where.get(str(line["id"]))
        signal.overall.add(line)
        if groups is None:
            signal.unmatched += 1
            continue
        for dim, value in groups.items():
            signal.by.setdefault(dim, {}).setdefault(str(value), Cell()).add(line)
    for dim, cells in signal.by.items():
        order = orders.get(dim) or ()
        rank = {g: i for i, g in enumerate(order)}
        signal.by[dim] = dict(sorted(cells.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))
    signal.by = {dim: cells for dim, cells in signal.by.items() if cells}
    return signal.to_dict()


def group_success(signal: Mapping[str, Any] | None, dimension: str | None = None) -> dict[str, dict[str, Any]]:
    """``{group: cell}`` of the named grouping of an aggregated signal (default: its first), {} without one.
    An evaluation summary has the same ``by`` shape: the baselines read its rates through this too."""
    by = (signal or {}).get("by") or {}
    if dimension is not None:
        return dict(by.get(dimension) or {})
    for cells in by.values():
        if cells:
            return dict(cells)
    return {}
