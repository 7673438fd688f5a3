"""The arith validator: the last ``<answer>`` against the sum, with partial credit for a near miss."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from envengineer.api import Validator, Verdict

_ANSWER = re.compile(r"<answer>\s*(-?\d{1,40})\s*</answer>")


class ArithValidator(Validator):
    name: ClassVar[str] = "arith"
    failure_types: ClassVar[tuple[str, ...]] = ("parse", "wrong")

    def score(self, record: Mapping[str, Any], response: str) -> Verdict:
        matches = _ANSWER.findall(response[-10_000:])
        if not matches:
            return Verdict(False, False, "parse", ("parse",))
        answer = record["answer"]
        if int(matches[-1]) != answer:
            # partial credit (Verdict.score): how close the sum is, relative to the right one
            closeness = max(0.0, 1.0 - abs(int(matches[-1]) - answer) / max(1, abs(answer)))
            return Verdict(False, False, "wrong", ("wrong",), score=round(0.5 * closeness, 6))
        return Verdict(True, True, None, (), 0)
