"""The reasoning-gym generator: its task options, prompts and warm start, and the projection that keeps each
dataset's levels to its own attributes and caps.

reasoning_gym is imported only inside the methods that generate, score or describe levels
(:func:`items.rg`), so this module loads, and ``envengineer plugins`` lists the family, without it;
those methods then stop with what to install.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from envengineer.api import Change, ConfigError, GenerationResult, Generator, Grouping, Knob, Projection, split_budget
from envengineer.tasks.reasoning_gym import PINNED_VERSION, TASK_NAME, compact
from envengineer.tasks.reasoning_gym.catalogue import CATALOGUE, DEFAULT_DATASETS, attributes
from envengineer.tasks.reasoning_gym.items import describe_levels, item_seed, make_item, rg
from envengineer.tasks.reasoning_gym.knobs import RGConfig, check_datasets, default_table, knobs_for, levels_of
from envengineer.tasks.reasoning_gym.validator import CLOSE, OPEN, answer_span

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
        return check_datasets(value)


class RGGenerator(Generator):
    name: ClassVar[str] = TASK_NAME
    description: ClassVar[str] = f"Procedural reasoning tasks from reasoning-gym {PINNED_VERSION} (extra: reasoning-gym)"
    Options: ClassVar[type[BaseModel]] = RGOptions
    config_model: ClassVar[type[BaseModel]] = RGConfig
    #: ``full``: the system prompt and the question; ``compact``: the embedded tiny policy's (compact.py; chain_sum only).
    prompt_styles: ClassVar[tuple[str, ...]] = ("full", "compact")
    knob_table: ClassVar[str | None] = "datasets"
    #: Over the whole catalogue; an instance declares the knobs of its run's datasets.
    knobs: ClassVar[tuple[Knob, ...]] = knobs_for(tuple(CATALOGUE))
    groupings: ClassVar[tuple[Grouping, ...]] = (Grouping("dataset", order=tuple(CATALOGUE)),)
    #: The frozen validation mix over the default datasets (benchmarks.py); a run on other datasets names its own
    #: eval.validation (docs/reasoning-gym.md).
    validation_benchmark: ClassVar[str | None] = "rg-val"

    options: RGOptions

    def __init__(self, options: BaseModel | None = None) -> None:
        super().__init__(options)
        self.knobs = knobs_for(self.options.datasets)  # type: ignore[misc]
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
