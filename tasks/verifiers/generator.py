"""The verifiers generator: a taskset's tasks as records, its TasksetConfig fields as knobs (the config model built
per run from the declared knobs), the projection checked by the taskset's own load()."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from envengineer.api import Change, ConfigError, GenerationResult, Generator, Grouping, Knob, Projection, split_budget
from envengineer.tasks.verifiers import PINNED_VERSION, TASK_NAME
from envengineer.tasks.verifiers.knobs import SHARE, VFOptions
from envengineer.tasks.verifiers.taskset import Taskset, _short, messages_of, seed_value

#: How many tasks the probe at construction loads (refusals, seed sensitivity).
PROBE_TASKS = 4


class VFGenerator(Generator):
    name: ClassVar[str] = TASK_NAME
    description: ClassVar[str] = f"A verifiers {PINNED_VERSION} (v1) taskset, knobs from its TasksetConfig (extra: verifiers)"
    Options: ClassVar[type[BaseModel]] = VFOptions
    config_model: ClassVar[type[BaseModel]] = BaseModel  # per run: built from the declared knobs (__init__)
    prompt_styles: ClassVar[tuple[str, ...]] = ("full",)

    options: VFOptions

    def __init__(self, options: BaseModel | None = None) -> None:
        if options is None:
            raise ConfigError(f"task {TASK_NAME}: needs task.taskset and task.knobs (docs/verifiers.md)")
        super().__init__(options)
        self.taskset = Taskset(self.options)
        o = self.options
        declared = [self.taskset.knob(name, spec) for name, spec in o.knobs.items()]
        self.defaults = {knob.name: default for knob, default in declared}
        fields = {knob.name: (int if knob.integer else float, Field(default, ge=knob.low, le=knob.high, description=knob.description))
                  for knob, default in declared}
        if o.groups is None:
            self.knobs = tuple(knob for knob, _ in declared)  # type: ignore[misc]
            self.group_values = {"all": None}
            self.config_model = create_model("VerifiersConfig", __config__=ConfigDict(extra="forbid"), **fields)  # type: ignore[misc]
        else:
            self.group_values = {str(v): v for v in o.groups.values}
            share = Knob(SHARE, 0.01, 1.0, 0.0001, share=True, description="share of the round's budget")
            self.knobs = (share, *(knob for knob, _ in declared))  # type: ignore[misc]
            row = create_model("VerifiersGroup", __config__=ConfigDict(extra="forbid"),
                               ratio=(float, Field(1 / len(self.group_values), ge=0, le=1, description=share.description)), **fields)
            names = tuple(self.group_values)

            def table_default() -> dict[str, Any]:
                return {g: row() for g in names}

            def exact_groups(cls: Any, value: Any) -> Any:
                if set(value) != set(names):
                    raise ValueError(f"groups must be exactly {', '.join(names)} (got {', '.join(map(str, value)) or 'none'})")
                return value

            self.config_model = create_model(  # type: ignore[misc]
                "VerifiersConfig", __config__=ConfigDict(extra="forbid"),
                __validators__={"_exact": field_validator("groups")(classmethod(exact_groups))},
                groups=(dict[str, row], Field(default_factory=table_default)),  # type: ignore[valid-type]
            )
            self.knob_table = "groups"  # type: ignore[misc]
            self.groupings = (Grouping("group", title=o.groups.field, order=names),)  # type: ignore[misc]
        self._probe()

    def _probe(self) -> None:
        """Load a few tasks of the default config: the network refusal, the scoring refusals, the seed's effect."""
        o, ts = self.options, self.taskset
        group = next(iter(self.group_values))
        first = self._load(self.defaults, group, seed=0, n=PROBE_TASKS)
        if not first:
            raise ConfigError(f"task.taskset: {o.taskset!r} loads no task at the default config")
        ts.refuse_scoring(first[0])
        other = self._load(self.defaults, group, seed=1, n=PROBE_TASKS)
        if {t.key for t in other} == {t.key for t in first}:
            how = f"its seed field {o.seed_field!r}" if o.seed_field else "verifiers' shuffle(seed) view"
            raise ConfigError(
                f"task.seed_field: {o.taskset!r} gives the same tasks for two round seeds through {how} (a seed hard-coded in "
                "the module?): every round would train on the same tasks; refused"
            )

    def _load(self, values: Mapping[str, Any], group: str, *, seed: int, n: int) -> list[Any]:
        o = self.options
        config = self.taskset.config(values, seed=seed_value(seed, group), size=n, group=self.group_values[group])
        return self.taskset.load(config, n, shuffle_seed=seed_value(seed, group) if o.shuffle else None)

    def group_rows(self, config: BaseModel) -> dict[str, dict[str, Any]]:
        """``{group: {knob: value}}`` of the declared knobs (the share left out)."""
        dumped = self.config_model.model_validate(config.model_dump()).model_dump()
        if self.knob_table is None:
            return {"all": {k: dumped[k] for k in self.options.knobs}}
        return {g: {k: row[k] for k in self.options.knobs} for g, row in dumped["groups"].items()}

    def generate(self, config: BaseModel, *, n: int, seed: int, workers: int | None = None, progress: Any = None) -> GenerationResult:
        rows = self.group_rows(config)
        if self.knob_table is None:
            counts = {"all": n}
        else:
            table = self.config_model.model_validate(config.model_dump()).model_dump()["groups"]
            counts = split_budget({g: table[g][SHARE] for g in self.group_values}, n)
        records = []
        for group, count in counts.items():
            if not count:
                continue
            tasks = self._load(rows[group], group, seed=seed, n=count)
            if len(tasks) < count:
                raise ConfigError(f"taskset {self.options.taskset!r} gave {len(tasks)} tasks for group {group}, {count} needed "
                                  "(declare task.size_field, or a larger taskset)")
            for index, task in enumerate(tasks):
                record: dict[str, Any] = {"id": f"{group}-{seed}-{index}" if self.knob_table else f"{seed}-{index}",
                                          "taskset": self.options.taskset}
                if self.knob_table:
                    record["group"] = group
                record.update(rows[group])
                record["seed"] = seed_value(seed, group)
                record["key"] = task.key
                record["task"] = task.data.model_dump(mode="json", exclude_defaults=True)
                records.append(json.loads(json.dumps(record, ensure_ascii=False)))
                if progress:
                    progress(1)
        return GenerationResult(records)

    def project(self, proposal: Mapping[str, Any], current: BaseModel) -> Projection:
        """The default projection; then the taskset's own load() must accept the result (its cross-field asserts), else the
        current config stays, with the reason."""
        projection = super().project(proposal, current)
        if projection.config.model_dump() == self.config_model.model_validate(current.model_dump()).model_dump():
            return projection
        try:
            for group, row in self.group_rows(projection.config).items():
                self._load(row, group, seed=0, n=1)
        except ConfigError as exc:
            reason = f"the taskset's load() refuses it ({_short(str(exc), 200)}); kept the current config"
            return Projection(config=self.config_model.model_validate(current.model_dump()), changes=(*projection.changes, Change("<config>", None, None, reason)))
        return projection

    def render(self, record: Mapping[str, Any], style: str | None = None) -> list[dict[str, str]]:
        style = style or "full"
        if style != "full":
            raise ValueError(f"unknown prompt style {style!r} (styles: {', '.join(self.prompt_styles)})")
        return messages_of(record.get("task") or {})

    def check_record(self, record: Mapping[str, Any]) -> None:
        for key in ("id", "taskset", "seed", "key", "task"):
            if key not in record:
                raise ValueError(f"record has no {key!r}")
        if record["taskset"] != self.options.taskset:
            raise ValueError(f"taskset: the record is of {record['taskset']!r}, this run's taskset is {self.options.taskset!r}")
        if self.knob_table and record.get("group") not in self.group_values:
            raise ValueError(f"group: {record.get('group')!r} is not one of {', '.join(self.group_values)}")
        try:
            task = self.taskset.task_of(record)
        except Exception as exc:  # noqa: BLE001 - untrusted record
            raise ValueError(f"task: not a task of {self.options.taskset!r}: {_short(str(exc), 200)}") from None
        if task.key != record["key"]:
            raise ValueError(f"key: the record's task data hashes to {task.key[:12]}…, not its key {str(record['key'])[:12]}…")

    def reference_answer(self, record: Mapping[str, Any]) -> str:
        field = self.options.answer_field
        if field is None:
            raise NotImplementedError(f"task {self.name!r}: no reference answer (set task.answer_field to the TaskData field that holds it)")
        return str((record.get("task") or {}).get(field, ""))

    def guidelines(self) -> str:
        o = self.options
        lines = [
            f"Task: the verifiers taskset `{o.taskset}`; each reply is scored by the taskset's own rewards "
            f"(valid from reward {o.valid_threshold:g}, best {o.reward_range[1]:g}).",
            "",
            "Knobs: fields of the taskset's config, each within its bounds:",
        ]
        for knob in self.knobs:
            if knob.share:
                lines.append(f"- `{SHARE}`: each group's share of the round's budget (the shares sum to 1).")
                continue
            harder = {"up": "higher is harder", "down": "lower is harder", "none": "no declared difficulty direction"}[knob.harder]
            lines.append(f"- `{knob.name}` ({knob.low:g}-{knob.high:g}, step {knob.step:g}; {harder}); round 0: {self.defaults[knob.name]}")
        if o.groups is not None:
            lines += ["", f"Groups: one per value of `{o.groups.field}` ({', '.join(self.group_values)})."]
        return "\n".join(lines)
