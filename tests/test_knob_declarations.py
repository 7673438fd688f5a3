"""Knob declarations that contradict the config model are refused by the conformance kit, and
random_config says so instead of returning the default config in silence."""

import random
import sys
from typing import ClassVar

import pytest
from pydantic import BaseModel, ConfigDict, Field

from envengineer import hookimpl
from envengineer.components import GenerationResult, Generator, Knob, Validator, Verdict
from envengineer.errors import RegistrationError
from envengineer.registry import Registry
from envengineer.testing import check_knob_declarations, check_task

GROUPS = ("short", "long")


class WordKnobs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ratio: float = Field(0.5, ge=0, le=1)
    word_len: int = Field(2, ge=1, le=4)


class WordsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    groups: dict[str, WordKnobs] = Field(default_factory=lambda: {g: WordKnobs() for g in GROUPS})


class WordsGenerator(Generator):
    """Repeat a word back."""

    name: ClassVar[str] = "toy-words"
    config_model: ClassVar[type[BaseModel]] = WordsConfig
    knob_table: ClassVar[str | None] = "groups"
    knobs: ClassVar[tuple[Knob, ...]] = (
        Knob("ratio", 0.01, 1.0, 0.0001, share=True),
        Knob("word_len", 1, 4, 1, integer=True, harder="up"),
    )

    def generate(self, config, *, n, seed, workers=None, progress=None):
        config = WordsConfig.model_validate(config.model_dump())
        records = []
        for gi, group in enumerate(GROUPS):
            count = round(config.groups[group].ratio * n) if gi < len(GROUPS) - 1 else n - len(records)
            for i in range(count):
                rng = random.Random(f"words|{seed}|{group}|{i}")
                word = "".join(rng.choice("abcdef") for _ in range(config.groups[group].word_len))
                records.append({"id": f"words-{group}-{seed}-{i}", "group": group, "word": word})
        return GenerationResult(records)

    def render(self, record, style="full"):
        text = f"Repeat {record['word']}"
        return text if style == "compact" else [{"role": "user", "content": text}]

    def group(self, record):
        return record["group"]

    def groups(self):
        return GROUPS

    def reference_answer(self, record):
        return record["word"]


class WordsValidator(Validator):
    name: ClassVar[str] = "toy-words"
    failure_types: ClassVar[tuple[str, ...]] = ("wrong",)

    def score(self, record, response):
        ok = response.strip() == record["word"]
        return Verdict(ok, ok, None if ok else "wrong", () if ok else ("wrong",), 0 if ok else None)


class TooWide(WordsGenerator):
    """word_len declared 1-9 where the field says le=4."""

    name: ClassVar[str] = "toy-words-wide"
    knobs: ClassVar[tuple[Knob, ...]] = (Knob("ratio", 0.01, 1.0, 0.0001, share=True), Knob("word_len", 1, 9, 1, integer=True, harder="up"))


class Misspelled(WordsGenerator):
    """A knob that is no field of the per-group model."""

    name: ClassVar[str] = "toy-words-typo"
    knobs: ClassVar[tuple[Knob, ...]] = (*WordsGenerator.knobs, Knob("alphabett", 2, 6, 1, integer=True, harder="up"))


class FlatConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    word_len: int = Field(2, ge=1, le=4)


class FlatTooWide(WordsGenerator):
    """No knob table: the knobs are top-level fields."""

    name: ClassVar[str] = "toy-words-flat"
    config_model: ClassVar[type[BaseModel]] = FlatConfig
    knob_table: ClassVar[str | None] = None
    knobs: ClassVar[tuple[Knob, ...]] = (Knob("word_len", 1, 9, 1, integer=True, harder="up"),)


class FlatMisspelled(FlatTooWide):
    name: ClassVar[str] = "toy-words-flat-typo"
    knobs: ClassVar[tuple[Knob, ...]] = (Knob("word_len", 1, 4, 1, integer=True), Knob("alphabett", 2, 6, 1, integer=True))


def _validator(name):
    return type(f"V_{name}", (WordsValidator,), {"name": name})


ALL = (WordsGenerator, TooWide, Misspelled)


@hookimpl
def register_generators(register):
    for cls in ALL:
        register(cls)


@hookimpl
def register_validators(register):
    for cls in ALL:
        register(_validator(cls.name))


def _check(task):
    return check_task(task, plugins=[__name__], n=12, fuzz=30, hash_seeds=())


def test_a_declaration_matching_the_model_conforms():
    assert sys.modules[__name__]  # the kit imports this module as the plugin
    assert _check("toy-words") == []


def test_the_kit_refuses_bounds_beyond_the_fields_constraints():
    problems = _check("toy-words-wide")
    knob = [p for p in problems if p.startswith("knobs:")]
    assert len(knob) == 1 and "'word_len'" in knob[0] and "high = 9" in knob[0], problems


def test_the_kit_refuses_a_knob_that_is_no_field():
    problems = _check("toy-words-typo")
    knob = [p for p in problems if p.startswith("knobs:")]
    assert len(knob) == 1 and "'alphabett'" in knob[0] and "no field of WordKnobs" in knob[0], problems


def test_top_level_knobs_are_checked_against_the_config_model():
    wide = check_knob_declarations(FlatTooWide())
    assert len(wide) == 1 and "'word_len'" in wide[0] and "high = 9" in wide[0] and "FlatConfig" in wide[0]
    typo = check_knob_declarations(FlatMisspelled())
    assert len(typo) == 1 and "'alphabett'" in typo[0] and "no field of FlatConfig" in typo[0]


def test_random_config_raises_instead_of_returning_the_default():
    good = WordsGenerator().random_config(3)
    assert good != WordsGenerator().default_config()
    for cls, name in ((TooWide, "toy-words-wide"), (FlatTooWide, "toy-words-flat"), (FlatMisspelled, "toy-words-flat-typo")):
        drawn = [seed for seed in range(20)]
        with pytest.raises(RegistrationError, match=rf"task '{name}': random_config\(\d+\) drew a config that does not validate"):
            for seed in drawn:  # a draw inside the field's constraints passes; some draw lands outside
                cls().random_config(seed)


def test_the_registry_pairs_the_toy_task(pm):
    pm.register(sys.modules[__name__], name="toy-words")
    generator, validator = Registry(pm).task("toy-words")
    record = generator.generate(generator.default_config(), n=2, seed=0).records[0]
    assert validator.score(record, generator.reference_answer(record)).valid
