"""The lifecycle hooks' payloads as typed models: the public contract between the loop and every plugin.

One model per payload (:data:`PAYLOADS`): ``on_run_start``'s ``info`` (:class:`RunStartPayload`),
``on_benchmark_end``'s ``benchmark`` (:class:`BenchmarkPayload`), ``on_design_end``'s ``design``
(:class:`DesignPayload`), ``on_round_end``'s ``metrics`` (:class:`RoundPayload`) and ``on_run_end``'s
``metrics`` (:class:`RunEndPayload`). The loop builds every payload through its model
(:mod:`envengineer.loop.lifecycle`), so a key that is renamed, missing or not declared fails there, in
the loop's own tests, instead of showing up as a missing chart. Hooks still receive plain JSON data
(``model_dump(mode="json")``: dicts, lists, str, numbers, bool, None), as they always have; a plugin
that wants attributes and types reads one back with ``RoundPayload.model_validate(metrics)``.

The parts that are a file's own content (the run config, a generator config, ``curves.jsonl`` lines,
a history line, the engineer's proposal) are free-form mappings (``dict[str, Any]``); the rest is
declared field by field, every model with ``extra="forbid"``. :func:`watched` wraps a payload so
that reading a key the model does not declare is recorded: the test that every built-in tracker
reads only declared fields (tests/test_trackers.py) runs them on watched payloads, and a
third-party tracker's tests can do the same.
"""

from __future__ import annotations

import sys
import types
import typing
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, StrictFloat, StrictInt

#: A number as written: an int stays an int, a float a float (a bool is not a number here).
Number = Union[StrictInt, StrictFloat]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ----------------------------------------------------------------------------- parts


class Suite(_Model):
    """Where ``envengineer suite`` shows the run (``suite:`` of the run config)."""

    table: str
    row: str | None = None
    order: int = 0


class KnobDeclaration(_Model):
    """One of the task's declared knobs (:class:`envengineer.api.Knob`)."""

    name: str
    low: Number
    high: Number
    step: Number
    integer: bool
    harder: str
    share: bool


class Rates(_Model):
    """An evaluation's rates, as its ``summary.json`` records them (overall, or one group's)."""

    n: int | None = None
    valid: int | None = None
    optimal: int | None = None
    valid_rate: Number | None = None
    optimal_rate: Number | None = None
    valid_se: Number | None = None
    optimal_se: Number | None = None
    failures: dict[str, int] | None = None
    mean_score: Number | None = None


class AggregateValues(_Model):
    """A benchmark's declared aggregate over its subsets, with its values."""

    key: str
    title: str
    how: str
    values: dict[str, Number | None]


class Evaluation(_Model):
    """One set's evaluation (``summary.json``), with the set's label, subsets and aggregate."""

    name: str
    label: str
    overall: Rates
    by: dict[str, dict[str, Rates]]
    subsets: str | None
    aggregate: AggregateValues | None
    summary: str


class SignalCell(_Model):
    """The training signal of a set of prompts (``train/signal.json``, overall or one group)."""

    prompts: int | None = None
    samples: int | None = None
    valid: int | None = None
    success: Number | None = None
    success_se: Number | None = None
    mean_score: Number | None = None
    mixed_share: Number | None = None
    mixed: int | None = None
    all_right: int | None = None
    all_wrong: int | None = None
    kept: int | None = None
    learnability: Number | None = None
    grpo_samples: int | None = None
    grpo_right: int | None = None


class Signal(_Model):
    """``train/signal.json``: the training signal overall and per group of each grouping."""

    overall: SignalCell
    by: dict[str, dict[str, SignalCell]]
    unmatched: int | None = None


class Train(_Model):
    """What the round's training did."""

    kept_prompts: Number | None
    optimizer_steps: int | None
    step_offset: int
    global_step: int
    live_trackers: list[str]
    metrics: dict[str, Any]


class Change(_Model):
    """One edit the projection made to the engineer's proposal."""

    field: str
    proposed: Any
    applied: Any
    reason: str


class Tokens(_Model):
    """Tokens summed over the design step's calls (the kinds its calls reported)."""

    prompt: int | None = None
    completion: int | None = None
    reasoning: int | None = None
    total: int | None = None


class TableRow(_Model):
    """One row of the per-round table the command prints (the base policy's first)."""

    round: int | Literal["base"]
    n: int | None = None
    valid_rate: Number | None = None
    optimal_rate: Number | None = None
    engineer: str = ""
    fallback: bool | None = None
    sampled_pass1: Number | None = None
    reason: str | None = None
    halted: bool | None = None
    vs_base: dict[str, Any] | None = None


# -------------------------------------------------------------------------- payloads


class RunStartPayload(_Model):
    """``on_run_start``'s ``info``."""

    name: str
    run_dir: str
    resumed: bool
    config: dict[str, Any]
    suite: Suite | None
    seed: int
    rounds: int
    task: str | None
    engineer: str | None
    policy: str | None
    trainer: str | None
    validation: str
    benchmarks: list[str]
    trackers: list[str]
    knobs: list[KnobDeclaration]
    knob_table: str | None


class BenchmarkPayload(Evaluation):
    """``on_benchmark_end``'s ``benchmark``: the set's :class:`Evaluation`, its role and round."""

    role: Literal["validation", "benchmark"]
    round: int | None


class DesignPayload(_Model):
    """``on_design_end``'s ``design``."""

    round: int
    engineer: str | None
    model: str | None
    fallback: bool
    reason: str
    halted: bool
    proposal: Any
    accepted: list[str]
    changes: list[Change]
    projection_changes: int
    config: dict[str, Any] | None
    knob_values: dict[str, dict[str, Any]]
    notes: str | None
    tokens: Tokens | None
    calls: int
    engineer_seconds: Number | None
    seconds: Number | None


class RoundPayload(_Model):
    """``on_round_end``'s ``metrics``."""

    valid_rate: Number | None
    optimal_rate: Number | None
    fallback: bool | None
    round: int
    n: int | None
    sampled_pass1: Number | None
    validation: Evaluation
    signal: Signal | None
    train: Train
    curves: list[dict[str, Any]]
    config: dict[str, Any] | None
    config_yaml: str | None
    knob_values: dict[str, dict[str, Any]]


class RunEndPayload(_Model):
    """``on_run_end``'s ``metrics``."""

    rounds: list[TableRow]
    status: Literal["finished", "failed", "interrupted"]
    error: str | None


#: The payload model of each lifecycle hook, by hook name and then by the argument that carries it.
PAYLOADS: dict[str, tuple[str, type[BaseModel]]] = {
    "on_run_start": ("info", RunStartPayload),
    "on_benchmark_end": ("benchmark", BenchmarkPayload),
    "on_design_end": ("design", DesignPayload),
    "on_round_end": ("metrics", RoundPayload),
    "on_run_end": ("metrics", RunEndPayload),
}


def build(model: type[BaseModel], data: Any) -> dict[str, Any]:
    """``data`` validated by ``model`` (a missing, renamed or undeclared key raises pydantic's
    ``ValidationError``), as the plain JSON data the hooks receive: what was given, nothing added
    (an optional part that ``data`` leaves out stays out, as in the file it was read from)."""
    return model.model_validate(data).model_dump(mode="json", exclude_unset=True)


# ------------------------------------------------------------------- reading guard


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []


def _wrap(annotation: Any, value: Any, path: str, misses: list[str], readers: tuple[str, ...] | None) -> Any:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        models = _models_in(annotation)
        if isinstance(value, dict) and models:
            return Watched(models[0], value, misses, path, readers)
        containers = [a for a in args if typing.get_origin(a) in (list, dict)]
        return _wrap(containers[0], value, path, misses, readers) if containers else value
    if isinstance(annotation, type) and issubclass(annotation, BaseModel) and isinstance(value, dict):
        return Watched(annotation, value, misses, path, readers)
    if origin is list and args and isinstance(value, list):
        return [_wrap(args[0], item, f"{path}[{i}]", misses, readers) for i, item in enumerate(value)]
    if origin is dict and len(args) == 2 and isinstance(value, dict) and args[1] is not Any:
        return {key: _wrap(args[1], item, f"{path}.{key}", misses, readers) for key, item in value.items()}
    return value


class Watched(dict):
    """A payload (or a declared part of one) that records in ``misses`` every read of a key its model
    does not declare (``[]``, ``.get``, ``in``), as ``path.key``; the read itself goes on as a dict's.
    ``readers``: only reads made by code in modules whose names start with one of these are recorded
    (a library the payload is handed to, such as wandb probing a config for ``_type``, is not the reader)."""

    def __init__(self, model: type[BaseModel], data: dict[str, Any], misses: list[str], path: str,
                 readers: tuple[str, ...] | None = None) -> None:
        self._fields = set(model.model_fields)
        self._misses, self._path, self._readers = misses, path, readers
        fields = model.model_fields
        super().__init__({key: _wrap(fields[key].annotation, value, f"{path}.{key}", misses, readers) if key in fields else value
                          for key, value in data.items()})

    def _check(self, key: Any) -> None:
        if key in self._fields:
            return
        if self._readers is not None:
            reader = sys._getframe(2).f_globals.get("__name__", "")
            if not reader.startswith(self._readers):
                return
        self._misses.append(f"{self._path}.{key}")

    def __getitem__(self, key: Any) -> Any:
        self._check(key)
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        self._check(key)
        return super().get(key, default)

    def __contains__(self, key: Any) -> bool:
        self._check(key)
        return super().__contains__(key)


def watched(model: type[BaseModel], data: dict[str, Any], misses: list[str], path: str | None = None, *,
            readers: tuple[str, ...] | None = None) -> Watched:
    """``data`` (a payload of ``model``) wrapped so that each read of an undeclared key, at any declared
    depth, is appended to ``misses``; free-form parts (a config, a curves line) are left as they are.
    ``readers``: module prefixes whose reads count (a tracker's package; default: every reader)."""
    return Watched(model, data, misses, path or model.__name__, readers)
