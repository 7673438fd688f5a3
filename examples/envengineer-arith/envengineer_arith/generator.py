"""The arith generator: deterministic generation per digit group, how evaluation files results, the prompts."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel

from envengineer.api import GenerationResult, Generator, Grouping, Knob

from envengineer_arith.benchmarks import VALIDATION
from envengineer_arith.knobs import GROUPS, KNOBS, ArithConfig

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
    knobs: ClassVar[tuple[Knob, ...]] = KNOBS
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
