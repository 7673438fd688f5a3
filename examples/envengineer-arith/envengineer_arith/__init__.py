"""envengineer-arith: add up integers, with knobs for how many terms and how many digits.

A complete task family in one module, to copy from when writing your own: a
generator (knobs, deterministic generation, projection, prompts) and a validator,
registered through the ``envengineer`` entry point in this package's pyproject.toml.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from envengineer import hookimpl
from envengineer.components import Change, GenerationResult, Generator, Grouping, Projection, Validator, Verdict

GROUPS = ("1d", "2d", "3d")  # digits per term
MAX_TERMS = 8


class Knobs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ratio: float = Field(ge=0, le=1)
    terms: int = Field(ge=2, le=MAX_TERMS)


class ArithConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    groups: dict[str, Knobs]


class ArithOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "arith"


def addend_count(terms: list[int]) -> str:
    """An instance's ``terms`` as its group in the ``addends`` grouping: how many there are."""
    return str(len(terms))


#: How evaluation files results: by digits per term (primary: one knob set each), then by addend count.
GROUPINGS = (
    Grouping("digits", title="digits per term", field="group", order=GROUPS),
    Grouping("addends", title="addends", field="terms", label=addend_count),
)


class ArithGenerator(Generator):
    name: ClassVar[str] = "arith"
    description: ClassVar[str] = "Add up integers (example third-party task)"
    Options: ClassVar[type[BaseModel]] = ArithOptions
    config_model: ClassVar[type[BaseModel]] = ArithConfig
    groupings: ClassVar[tuple[Grouping, ...]] = GROUPINGS

    def default_config(self) -> ArithConfig:
        return ArithConfig(groups={g: Knobs(ratio=1 / len(GROUPS), terms=2) for g in GROUPS})

    def random_config(self, seed: int) -> ArithConfig:
        rng = random.Random(seed)
        weights = [rng.random() + 0.1 for _ in GROUPS]
        return ArithConfig(groups={g: Knobs(ratio=w / sum(weights), terms=rng.randint(2, MAX_TERMS)) for g, w in zip(GROUPS, weights)})

    def generate(self, config: BaseModel, *, n: int, seed: int, workers: int | None = None, progress: Any = None) -> GenerationResult:
        cfg = ArithConfig.model_validate(config.model_dump())
        records = []
        for gi, group in enumerate(GROUPS):
            count = round(cfg.groups[group].ratio * n) if gi < len(GROUPS) - 1 else n - len(records)
            for index in range(count):
                rng = random.Random(f"arith|{seed}|{group}|{index}")
                digits = gi + 1
                terms = [rng.randint(10 ** (digits - 1), 10**digits - 1) for _ in range(cfg.groups[group].terms)]
                records.append({"id": f"arith-{group}-{seed}-{index}", "group": group, "terms": terms, "answer": sum(terms)})
                if progress:
                    progress(1)
        return GenerationResult(records)

    def project(self, proposal: Mapping[str, Any], current: BaseModel) -> Projection:
        merged = {g: k.model_dump() for g, k in ArithConfig.model_validate(current.model_dump()).groups.items()}
        changes: list[Change] = []
        groups = proposal.get("groups", {}) if isinstance(proposal, Mapping) else {}
        for group, knobs in (groups.items() if isinstance(groups, Mapping) else []):
            if group not in merged or not isinstance(knobs, Mapping):
                changes.append(Change(f"groups.{group}", knobs, None, "unknown group; ignored"))
                continue
            for knob, value in knobs.items():
                if knob not in merged[group] or isinstance(value, bool) or not isinstance(value, (int, float)):
                    changes.append(Change(f"groups.{group}.{knob}", value, None, "unknown knob or not a number; ignored"))
                    continue
                low, high = (0.01, 1.0) if knob == "ratio" else (2, MAX_TERMS)
                clipped = type(merged[group][knob])(min(high, max(low, value)))
                if clipped != value:
                    changes.append(Change(f"groups.{group}.{knob}", value, clipped, "clipped to range"))
                merged[group][knob] = clipped
        total = sum(k["ratio"] for k in merged.values())
        for k in merged.values():
            k["ratio"] = k["ratio"] / total
        return Projection(ArithConfig(groups={g: Knobs(**k) for g, k in merged.items()}), tuple(changes))

    def render(self, record: Mapping[str, Any], style: str | None = None) -> list[dict[str, str]] | str:
        question = " + ".join(str(t) for t in record["terms"])
        if style == "compact":
            return question + " ="
        return [{"role": "user", "content": f"Compute {question}. Answer with the number inside <answer></answer>."}]

    def guidelines(self) -> str:
        return "Task: add integers. Knobs per digit group: ratio (budget share) and terms (2-8 addends)."

    def reference_answer(self, record: Mapping[str, Any]) -> str:
        return f"<answer>{record['answer']}</answer>"


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


@hookimpl
def register_generators(register):
    register(ArithGenerator)


@hookimpl
def register_validators(register):
    register(ArithValidator)
