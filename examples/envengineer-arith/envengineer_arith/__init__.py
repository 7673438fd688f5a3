"""envengineer-arith: add up integers, with knobs for how many terms and how many digits.

A complete task family in one module, to copy from when writing your own: a
generator (declared knobs, deterministic generation, prompts), a validator and a frozen
validation benchmark (``data/arith-val.jsonl`` with its sha256 in ``data/SHA256SUMS``,
rebuilt identically by :func:`build_validation_set`: ``envengineer bench build arith-val
--check``), registered through the ``envengineer`` entry point in this package's pyproject.toml. Everything else
comes from the defaults: the default config is the config model's field defaults, and the
declared knobs give the projection of an engineer's proposal (clipped to their bounds and
steps, the budget shares renormalised), the random config and what the baselines move.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from envengineer import hookimpl
from envengineer.api import Benchmark, GenerationResult, Generator, Grouping, Knob, Validator, Verdict, read_checksums

GROUPS = ("1d", "2d", "3d")  # digits per term
MAX_TERMS = 8
DATA = Path(__file__).parent / "data"  # package data (pyproject.toml: [tool.setuptools.package-data])
VALIDATION = "arith-val"
#: The validation set: every digit group × these addend counts, this many instances each (3 × 4 × 10 = 120).
VALIDATION_TERMS = (2, 3, 4, 5)
VALIDATION_PER_CELL = 10


class Knobs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ratio: float = Field(1 / len(GROUPS), ge=0, le=1, description="share of the round's budget")
    terms: int = Field(2, ge=2, le=MAX_TERMS, description="addends per instance")


class ArithConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    groups: dict[str, Knobs] = Field(default_factory=lambda: {g: Knobs() for g in GROUPS})


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
    config_model: ClassVar[type[BaseModel]] = ArithConfig
    knob_table: ClassVar[str | None] = "groups"
    knobs: ClassVar[tuple[Knob, ...]] = (
        Knob("ratio", 0.01, 1.0, 0.0001, share=True, description="share of the round's budget"),
        Knob("terms", 2, MAX_TERMS, 1, integer=True, harder="up", description="addends per instance"),
    )
    groupings: ClassVar[tuple[Grouping, ...]] = GROUPINGS
    #: A run evaluates on this set each round unless its config names another (eval.validation).
    validation_benchmark: ClassVar[str | None] = VALIDATION

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


def build_validation_set() -> list[dict[str, Any]]:
    """The frozen validation set's records in file order: the recipe ``envengineer bench build`` reruns.

    Seeded by the set's name and the cell, never by the training seeds, so no round's training
    set draws the same stream."""
    records = []
    for gi, group in enumerate(GROUPS):
        digits = gi + 1
        for count in VALIDATION_TERMS:
            for index in range(VALIDATION_PER_CELL):
                rng = random.Random(f"{VALIDATION}|{group}|{count}|{index}")
                terms = [rng.randint(10 ** (digits - 1), 10**digits - 1) for _ in range(count)]
                records.append({"id": f"{VALIDATION}-{group}-{count}-{index}", "group": group, "terms": terms, "answer": sum(terms)})
    return records


@hookimpl
def register_benchmarks(register):
    path = DATA / f"{VALIDATION}.jsonl"
    register(Benchmark(
        name=VALIDATION, task="arith", description="arith validation set: 120 sums over every digit group and 2-5 addends",
        path=path, sha256=read_checksums(DATA).get(path.name, ""), build=build_validation_set, label="validation",
    ))


@hookimpl
def register_generators(register):
    register(ArithGenerator)


@hookimpl
def register_validators(register):
    register(ArithValidator)
