"""The verifiers validator: a reply scored by the taskset's own rewards, offline, under a time limit."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel

from envengineer.api import ConfigError, Validator, Verdict
from envengineer.tasks.verifiers import TASK_NAME
from envengineer.tasks.verifiers.knobs import VFOptions
from envengineer.tasks.verifiers.taskset import Taskset, messages_of

class VFValidator(Validator):
    name: ClassVar[str] = TASK_NAME
    #: The generator's: the registry makes the validator with the run's task section (Registry.validator_for).
    Options: ClassVar[type[BaseModel]] = VFOptions
    failure_types: ClassVar[tuple[str, ...]] = ("too_long", "bad_record", "reward_error", "reward_timeout", "no_reward", "zero", "partial")

    def __init__(self, options: BaseModel | None = None) -> None:
        if options is None:
            raise ConfigError(f"task {TASK_NAME}: needs task.taskset and task.knobs (docs/verifiers.md)")
        super().__init__(options)
        self.taskset = Taskset(self.options)  # type: ignore[arg-type]

    def score(self, record: Mapping[str, Any], response: str) -> Verdict:
        o = self.options
        response = response if isinstance(response, str) else str(response)
        if len(response) > o.max_answer_chars:
            return Verdict(False, False, "too_long", ("too_long",))
        try:
            task = self.taskset.task_of(record)
        except Exception:  # noqa: BLE001 - a malformed record
            return Verdict(False, False, "bad_record", ("bad_record",))
        status, value = self.taskset.reward(task, messages_of(record.get("task") or {}), response)
        if status != "ok":
            kind = {"timeout": "reward_timeout", "empty": "no_reward"}.get(status, "reward_error")
            return Verdict(False, False, kind, (kind,))
        if not math.isfinite(value):
            return Verdict(False, False, "reward_error", ("reward_error",))
        worst, best = o.reward_range
        score = min(1.0, max(0.0, (value - worst) / (best - worst)))
        valid = value >= o.valid_threshold
        optimal = valid and value >= best
        if valid:
            return Verdict(True, optimal, None, (), score=score)
        kind = "zero" if value <= worst else "partial"
        return Verdict(False, False, kind, (kind,), score=score)
