"""Registers the reasoning-gym generator and validator (docs/reasoning-gym.md).

reasoning_gym is imported only inside the methods that generate, score or describe levels
(:func:`rg`), so this module loads, and ``envengineer plugins`` lists the family, without it;
those methods then stop with what to install.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from envengineer.api import (
    Change,
    ConfigError,
    GenerationResult,
    Generator,
    Grouping,
    Knob,
    Projection,
    hookimpl,
    split_budget,
)
from envengineer.tasks.reasoning_gym import PINNED_VERSION, TASK_NAME, compact
from envengineer.tasks.reasoning_gym.catalogue import CATALOGUE, DEFAULT_DATASETS, attributes, refusal
from envengineer.tasks.reasoning_gym.items import (  # noqa: F401 - importable from here too
    describe_levels,
    item_seed,
    level_ranges,
    make_item,
    repeated_levels,
    rg,
)
from envengineer.tasks.reasoning_gym.validator import (  # noqa: F401 - importable from here too
    ANSWER_FACTOR,
    CLOSE,
    MIN_ANSWER_CHARS,
    OPEN,
    RAISED,
    SCORE_TIME_LIMIT,
    RGValidator,
    answer_span,
    bounded_call,
)

#: reasoning-gym's own default system prompt (reasoning_gym.utils.SYSTEM_PROMPTS["default"], 0.1.25).
DEFAULT_SYSTEM_PROMPT = (
    "Given a problem, your task is to answer the question by thinking step-by-step in a clear and specific manner.\n"
    "Once you have thought about the reasoning process, provide the answer in the following format:\n"
    "<answer>answer here</answer>\n"
    "Do not explain your reasoning inside the answer tags, provide only the final answer. When an example is provided, "
    "you should strictly follow the format of the output/answer in that example.\n"
)
def _dataset_list(value: Any) -> Any:
    """``"chain_sum,maze"`` (a command-line option) as a list."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _check_datasets(names: list[str]) -> list[str]:
    unknown = [name for name in names if name not in CATALOGUE]
    if unknown:
        raise ValueError(refusal(unknown))
    if not names:
        raise ValueError("at least one dataset")
    if len(set(names)) != len(names):
        raise ValueError("a dataset is named twice")
    return names


class RGOptions(BaseModel):
    """The ``task:`` section of a run config for reasoning-gym."""

    model_config = ConfigDict(extra="forbid")

    name: Literal["reasoning-gym"] = TASK_NAME
    datasets: list[str] = Field(default_factory=lambda: list(DEFAULT_DATASETS), description="the run's datasets, from the vetted catalogue")
    system_prompt: str = Field(DEFAULT_SYSTEM_PROMPT, description="the system message of the full prompt (asks for <answer>...</answer>)")

    _split = field_validator("datasets", mode="before")(classmethod(lambda cls, v: _dataset_list(v)))

    @field_validator("datasets")
    @classmethod
    def _vetted(cls, value: list[str]) -> list[str]:
        return _check_datasets(value)


class DatasetLevels(BaseModel):
    """One dataset's budget share and curriculum levels (the attributes are extra fields: ``dist: 1``)."""

    model_config = ConfigDict(extra="allow")

    ratio: float = Field(ge=0, le=1, description="share of the round's budget")

    @model_validator(mode="after")
    def _levels_are_whole(self) -> DatasetLevels:
        for key, value in (self.model_extra or {}).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"level {key} must be a whole number >= 0, not {value!r}")
        return self


class RGConfig(BaseModel):
    """The config the engineer edits: per dataset a ``ratio`` and its curriculum levels."""

    model_config = ConfigDict(extra="forbid")

    datasets: dict[str, DatasetLevels] = Field(default_factory=lambda: default_table(DEFAULT_DATASETS))

    @model_validator(mode="after")
    def _in_catalogue(self) -> RGConfig:
        _check_datasets(list(self.datasets))
        for name, entry in self.datasets.items():
            levels = dict(entry.model_extra or {})
            expected = attributes(name)
            if set(levels) != set(expected):
                raise ValueError(f"{name}: levels must be exactly {', '.join(expected)} (got {', '.join(levels) or 'none'})")
            for attr, level in levels.items():
                cap = CATALOGUE[name].caps[attr]
                if level > cap:
                    raise ValueError(f"{name}.{attr} = {level} is above its cap {cap}")
        return self


def default_table(names: tuple[str, ...] | list[str]) -> dict[str, DatasetLevels]:
    """Equal shares, every level 0."""
    return {name: DatasetLevels(ratio=1 / len(names), **{attr: 0 for attr in attributes(name)}) for name in names}


def levels_of(entry: Mapping[str, Any]) -> dict[str, int]:
    """The curriculum levels of one dataset's config row (every field but ``ratio``)."""
    return {key: int(value) for key, value in entry.items() if key != "ratio"}


def _knobs_for(names: tuple[str, ...] | list[str]) -> tuple[Knob, ...]:
    """The ratio, then one integer knob per attribute name over ``names`` (high: the loosest cap; each dataset's own cap is
    enforced by project())."""
    knobs = [Knob("ratio", 0.01, 1.0, 0.0001, share=True, description="share of the round's budget")]
    seen: dict[str, list[str]] = {}
    for name in names:
        for attr in attributes(name):
            seen.setdefault(attr, []).append(name)
    for attr, owners in seen.items():
        cap = max(CATALOGUE[o].caps[attr] for o in owners)
        caps = ", ".join(f"{o} 0-{CATALOGUE[o].caps[attr]}" for o in owners)
        knobs.append(Knob(attr, 0, max(cap, 0), 1, integer=True, harder="up", description=f"curriculum level ({caps})"))
    return tuple(knobs)


class RGGenerator(Generator):
    name: ClassVar[str] = TASK_NAME
    description: ClassVar[str] = f"Procedural reasoning tasks from reasoning-gym {PINNED_VERSION} (extra: reasoning-gym)"
    Options: ClassVar[type[BaseModel]] = RGOptions
    config_model: ClassVar[type[BaseModel]] = RGConfig
    #: ``full``: the system prompt and the question; ``compact``: the embedded tiny policy's (compact.py; chain_sum only).
    prompt_styles: ClassVar[tuple[str, ...]] = ("full", "compact")
    knob_table: ClassVar[str | None] = "datasets"
    #: Over the whole catalogue; an instance declares the knobs of its run's datasets.
    knobs: ClassVar[tuple[Knob, ...]] = _knobs_for(tuple(CATALOGUE))
    groupings: ClassVar[tuple[Grouping, ...]] = (Grouping("dataset", order=tuple(CATALOGUE)),)
    #: The frozen validation mix over the default datasets (benchmarks.py); a run on other datasets names its own
    #: eval.validation (docs/reasoning-gym.md).
    validation_benchmark: ClassVar[str | None] = "rg-val"

    options: RGOptions

    def __init__(self, options: BaseModel | None = None) -> None:
        super().__init__(options)
        self.knobs = _knobs_for(self.options.datasets)  # type: ignore[misc]
        self.groupings = (Grouping("dataset", order=tuple(self.options.datasets)),)  # type: ignore[misc]

    def default_config(self) -> RGConfig:
        return RGConfig(datasets=default_table(self.options.datasets))

    def generate(self, config: BaseModel, *, n: int, seed: int, workers: int | None = None, progress: Any = None) -> GenerationResult:
        cfg = RGConfig.model_validate(config.model_dump())
        table = {name: entry.model_dump() for name, entry in cfg.datasets.items()}
        records = []
        for dataset, count in split_budget({name: row["ratio"] for name, row in table.items()}, n).items():
            levels = levels_of(table[dataset])
            for index in range(count):
                item = make_item(dataset, levels, item_seed(seed, dataset, index))
                records.append({
                    "id": f"{dataset}-{seed}-{index}", "dataset": dataset, "levels": levels,
                    "question": item["question"], "answer": item["answer"], "metadata": item["metadata"],
                })
                if progress:
                    progress(1)
        return GenerationResult(records)

    def project(self, proposal: Mapping[str, Any], current: BaseModel) -> Projection:
        """The default projection, after each dataset's levels are kept to its own attributes and caps."""
        changes: list[Change] = []
        if isinstance(proposal, Mapping) and isinstance(proposal.get("datasets"), Mapping):
            table: dict[Any, Any] = {}
            for name, row in proposal["datasets"].items():
                if not isinstance(row, Mapping) or name not in CATALOGUE:
                    table[name] = row  # the default projection reports it
                    continue
                kept: dict[Any, Any] = {}
                for key, raw in row.items():
                    where = f"datasets.{name}.{key}"
                    if key == "ratio":
                        kept[key] = raw
                    elif key not in CATALOGUE[name].caps:
                        changes.append(Change(where, _short(raw), None, f"not a level of {name} (levels: {', '.join(attributes(name))}); ignored"))
                    else:
                        cap = CATALOGUE[name].caps[key]
                        value = _number(raw)
                        if value is not None and value > cap:
                            changes.append(Change(where, _short(raw), cap, f"above {name}'s cap {cap} (prompts up to ~1.5k characters); clipped"))
                            kept[key] = cap
                        else:
                            kept[key] = raw
                table[name] = kept
            proposal = {**proposal, "datasets": table}
        projection = super().project(proposal, current)
        if not changes:
            return projection
        return Projection(config=projection.config, changes=(*changes, *projection.changes), accepted=projection.accepted)

    def render(self, record: Mapping[str, Any], style: str | None = None) -> list[dict[str, str]] | str:
        style = style or "full"
        if style == "compact":
            return compact.render(record)
        if style != "full":
            raise ValueError(f"unknown prompt style {style!r} (styles: {', '.join(self.prompt_styles)})")
        return [{"role": "system", "content": self.options.system_prompt}, {"role": "user", "content": str(record["question"])}]

    def example_prompt(self, record: Mapping[str, Any]) -> str:
        """The shortest style's prompt without the system prompt, which every instance shares and which alone would fill
        a failing example's excerpt (~470 characters): ``38-45-35=`` for chain_sum, the question otherwise."""
        try:
            return compact.render(record)
        except ValueError:
            return str(record.get("question", ""))

    def decode_response(self, record: Mapping[str, Any], response: str, style: str | None = None) -> str:
        """A compact answer (the bare result) inside <answer>...</answer>; a full one as it is."""
        return compact.to_answer(response) if style == "compact" else response

    def answer_end(self, record: Mapping[str, Any], response: str, style: str | None = None) -> int | None:
        """Full: the validator reads the last <answer>...</answer>; compact: the first line. What follows changes nothing."""
        if style == "compact":
            return compact.answer_end(response)
        span = answer_span(response)
        return None if span is None else span[1] + len(CLOSE)

    def check_record(self, record: Mapping[str, Any]) -> None:
        for key in ("id", "dataset", "levels", "question", "answer", "metadata"):
            if key not in record:
                raise ValueError(f"record has no {key!r}")
        if record["dataset"] not in CATALOGUE:
            raise ValueError(f"dataset: {record['dataset']!r} is not in the catalogue")

    def reference_answer(self, record: Mapping[str, Any]) -> str:
        return f"{OPEN}{record['answer']}{CLOSE}"

    # The embedded tiny policy reads the compact style character by character (compact.py): the default tokenizer and
    # embeddings, and a warm start on chain_sum items of low levels whatever the run's datasets.

    def reference_completion(self, record: Mapping[str, Any], style: str) -> str:
        return compact.completion(record) if style == "compact" else self.reference_answer(record)

    def warm_start_pairs(self, *, n: int, seed: int, style: str) -> list[tuple[str, str]]:
        if style != "compact":
            return super().warm_start_pairs(n=n, seed=seed, style=style)
        others = [name for name in self.options.datasets if name not in compact.COMPACT_DATASETS]
        if others:  # refused before the warm start rather than at the run's first prompt
            raise ConfigError(f"task {TASK_NAME}: {compact.unsupported(*others)}")
        return compact.warm_start_pairs(n=n, seed=seed)

    def guidelines(self) -> str:
        rg()  # stops with what to install, before any text
        lines = [
            f"Task: procedural reasoning problems from reasoning-gym {PINNED_VERSION}, one group per dataset. "
            "The policy answers inside <answer>...</answer>; reasoning-gym's scorer grades the last such answer in [0, 1].",
            "",
            "Knobs per dataset: `ratio` (its share of the round's budget; the shares sum to 1) and its curriculum levels "
            "(integers from 0, higher is harder, each up to the dataset's cap). Each attribute below names the quantity it sets "
            "and, per level, what reasoning-gym draws for it: `low–high`, the range it is drawn from, or one number, that value. "
            "A level marked 'the same items as level L' generates exactly level L's items: moving to it changes nothing.",
        ]
        for name in self.options.datasets:
            entry = CATALOGUE[name]
            valid = "valid at score 1" if entry.valid_at >= 1 else f"valid from score {entry.valid_at:g}, optimal at 1"
            lines += ["", f"- **{name}**: {entry.note} ({valid})."]
            for attr, cap in entry.caps.items():
                lines.append(f"  - `{attr}` (0-{cap}): {entry.draws[attr]}; per level {describe_levels(name, attr)}")
        return "\n".join(lines)

    def design_brief(self, budget: int | None = None) -> str:
        per_round = f" at {budget} instances per round" if budget else ""
        return (
            "The policy trains on reasoning-gym problems drawn from your configuration (per dataset: a budget share and "
            "curriculum levels) and is judged on held-out evaluation sets it never trains on, which mix levels.\n\n"
            "Constraints on the configuration:\n"
            f"- Datasets are fixed for the run ({', '.join(self.options.datasets)}); change only their `ratio` and levels.\n"
            "- Levels are whole numbers from 0 to each dataset's cap; values above a cap are clipped, unknown levels ignored.\n"
            f"- The ratios sum to 1: the training budget is fixed{per_round}."
        )


def _number(value: Any) -> float | None:
    from envengineer.api import number

    return number(value)


def _short(value: Any, limit: int = 80) -> Any:
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    text = value if isinstance(value, str) else f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


@hookimpl
def register_generators(register):
    register(RGGenerator)


@hookimpl
def register_validators(register):
    register(RGValidator)


@hookimpl
def register_benchmarks(register):
    from envengineer.tasks.reasoning_gym.benchmarks import specs

    for spec in specs():
        register(spec)
