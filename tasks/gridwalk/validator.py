"""The grid-walk validator: the answer's cells against the walk replayed from the record."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from envengineer.api import Validator, Verdict
from envengineer.tasks.gridwalk import TASK_NAME
from envengineer.tasks.gridwalk.walk import solve

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_CELL = re.compile(r"^(\d{1,2})_(\d{1,2})$")


class GridWalkValidator(Validator):
    name: ClassVar[str] = TASK_NAME
    failure_types: ClassVar[tuple[str, ...]] = ("parse", "length", "wrong")

    def score(self, record: Mapping[str, Any], response: str) -> Verdict:
        matches = _ANSWER.findall(response[-20_000:])
        if not matches:
            return Verdict(False, False, "parse", ("parse",))
        words = matches[-1].split()
        cells = [_CELL.match(w) for w in words]
        if not words or any(c is None for c in cells):
            return Verdict(False, False, "parse", ("parse",))
        answer = [[int(c.group(1)), int(c.group(2))] for c in cells]  # type: ignore[union-attr]
        truth = solve(record)
        if len(answer) != len(truth):
            return Verdict(False, False, "length", ("length",))
        if answer != truth:
            return Verdict(False, False, "wrong", ("wrong",))
        return Verdict(True, True, None, ())
