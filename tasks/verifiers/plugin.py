"""Registers the ``verifiers`` task family: a verifiers (v1) taskset driven through its own loaders
(docs/verifiers.md).

verifiers is imported only when the family is made for a run (:func:`vf`), so this module loads, and
``envengineer plugins`` lists the family, without it. Everything the family refuses, it refuses when
it is made, before any round: each refusal names the taskset and the field, hook or judge at fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import json
import math
import socket
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator

from envengineer.api import (
    Change,
    ConfigError,
    GenerationResult,
    Generator,
    Grouping,
    Knob,
    Projection,
    Validator,
    Verdict,
    hookimpl,
    split_budget,
)
from envengineer.tasks.verifiers import INSTALL_HINT, PINNED_VERSION, TASK_NAME

#: The TasksetConfig fields every taskset has (verifiers' SharedTasksetConfig and ``id``): never a knob, a seed,
#: size or group field; ``fixed`` may set ``task`` (the TaskConfig: plugged rewards, judges) and ``system_prompt``.
RESERVED_FIELDS = ("id", "task", "system_prompt")
#: The knob holding each group's share of the round's budget (only with ``groups``).
SHARE = "ratio"
#: How many tasks the probe at construction loads (refusals, seed sensitivity).
PROBE_TASKS = 4


def check_python(version: tuple[int, ...] | None = None) -> None:
    """A ConfigError on Python < 3.11 (verifiers 0.4.0 requires 3.11), before verifiers is imported."""
    version = tuple(sys.version_info[:3]) if version is None else tuple(version)
    if version < (3, 11):
        raise ConfigError(
            f"task {TASK_NAME}: needs Python >= 3.11 (verifiers {PINNED_VERSION} requires it); this is Python "
            f"{'.'.join(map(str, version))}. Run envengineer under Python 3.11 or newer to use verifiers tasksets."
        )


def vf() -> Any:
    """verifiers' loaders module (``verifiers.v1.utils.loaders``), or a ConfigError saying what to install."""
    check_python()
    try:
        from verifiers.v1.utils import loaders
    except ImportError as exc:
        raise ConfigError(f"task {TASK_NAME}: the verifiers package is not installed ({exc}): {INSTALL_HINT}") from None
    return loaders


# ------------------------------------------------------------------ options


class KnobSpec(BaseModel):
    """One declared knob: a numeric field of the taskset's TasksetConfig."""

    model_config = ConfigDict(extra="forbid")

    range: tuple[float, float] | None = Field(None, description="[low, high] (default: the field's own ge/le)")
    step: float | None = Field(None, gt=0, description="the smallest move (default 1 for an integer field; required for a float)")
    integer: bool | None = Field(None, description="whole values (default: the field is an int)")
    harder: Literal["up", "down", "none"] = Field("none", description="which way makes tasks harder")
    description: str = ""


class GroupSpec(BaseModel):
    """One group per value of a TasksetConfig field (e.g. a sub-task mix), each with its budget share."""

    model_config = ConfigDict(extra="forbid")

    field: str = Field(description="the TasksetConfig field whose values are the groups")
    values: list[Any] = Field(min_length=2, description="the field's values, one group each (names: str(value))")

    @field_validator("values")
    @classmethod
    def _distinct(cls, values: list[Any]) -> list[Any]:
        names = [str(v) for v in values]
        if len(set(names)) != len(names):
            raise ValueError("a group value is named twice")
        return values


class VFOptions(BaseModel):
    """The ``task:`` section of a run config for a verifiers taskset."""

    model_config = ConfigDict(extra="forbid")

    name: Literal["verifiers"] = TASK_NAME
    taskset: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@/-]*$", description="the verifiers taskset id (an importable package exporting its Taskset)")
    seed_field: str | None = Field("seed", description="the TasksetConfig field set from the round's seed (null: none; then shuffle must be on)")
    shuffle: bool = Field(False, description="draw each round's tasks with verifiers' own shuffle(seed) view of a finite taskset (for tasksets without a seed field)")
    size_field: str | None = Field(None, description="the TasksetConfig field set to how many tasks a group needs (null: take them from load()'s stream)")
    knobs: dict[str, KnobSpec] = Field(min_length=1, description="the TasksetConfig fields the engineer may move, with bounds")
    groups: GroupSpec | None = Field(None, description="one group per value of a field, each with its share (default: one group, all)")
    fixed: dict[str, Any] = Field(default_factory=dict, description="other TasksetConfig fields, held for the whole run")
    answer_field: str | None = Field(None, description="the TaskData field holding the reference answer (for reference checks, warm starts, the simulated student)")
    valid_threshold: float = Field(1.0, description="a reply is valid when the taskset's reward reaches this")
    reward_range: tuple[float, float] = Field((0.0, 1.0), description="the taskset reward's [worst, best]: the verdict's score is its place in it")
    allow_judges: bool = Field(False, description="score with the taskset's LLM judges (cost, non-determinism, network at scoring)")
    score_timeout_s: float = Field(10.0, gt=0, le=600, description="seconds one task.score may take (a worker thread)")
    max_answer_chars: int = Field(32_768, ge=1, description="longer replies are refused as too_long before any reward runs")

    @model_validator(mode="after")
    def _consistent(self) -> VFOptions:
        low, high = self.reward_range
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ValueError(f"reward_range: needs finite worst < best, got {list(self.reward_range)}")
        if not math.isfinite(self.valid_threshold):
            raise ValueError("valid_threshold: must be a finite number")
        if self.seed_field is None and not self.shuffle:
            raise ValueError(
                f"seed_field: taskset {self.taskset!r} has no seed field and shuffle is off, so its tasks would not change "
                "with the round: name its seed field, or set shuffle: true for a finite taskset"
            )
        if self.shuffle and self.size_field is not None:
            raise ValueError(
                "size_field: with shuffle, each round draws from the whole of the taskset's load(); a size field set to the "
                "round's count would make that pool exactly the tasks taken, the same every round (leave size_field unset, "
                "or set the pool's size under fixed)"
            )
        roles: dict[str, str] = {}
        for role, names in (("seed_field", [self.seed_field]), ("size_field", [self.size_field]),
                            ("groups.field", [self.groups.field] if self.groups else []), ("knobs", list(self.knobs)),
                            ("fixed", list(self.fixed))):
            for name in names:
                if name is None:
                    continue
                if name == "id" or (name in RESERVED_FIELDS and role != "fixed"):
                    raise ValueError(f"{role}: {name!r} is a field every taskset has ({', '.join(RESERVED_FIELDS)}), not one to set")
                if name in roles:
                    raise ValueError(f"{role}: field {name!r} is already {roles[name]}")
                roles[name] = role
        if SHARE in self.knobs and self.groups:
            raise ValueError(f"knobs: {SHARE!r} is the groups' budget share here; rename nothing, declare another field")
        return self


# ------------------------------------------------------------------ the network guard

_GUARD = threading.Lock()


class NetworkUsed(Exception):
    """A taskset reached for the network while it loaded."""


@contextlib.contextmanager
def no_network() -> Iterator[list[str]]:
    """Refuse every name lookup and internet connection while loading (process-wide; one load at a time); yields the
    list of attempts, so a taskset that catches the refusal and goes on is caught too.

    Unix sockets stay allowed (they are local)."""
    attempts: list[str] = []

    def refuse(what: str) -> Any:
        def blocked(*args: Any, **kwargs: Any) -> Any:
            attempts.append(f"{what}({_short(args[0] if args else '', 60)})")
            raise NetworkUsed(attempts[-1])
        return blocked

    originals = {name: getattr(socket, name) for name in ("getaddrinfo", "create_connection", "gethostbyname")}
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def guarded(original: Any) -> Any:
        def call(self: socket.socket, address: Any) -> Any:
            if self.family in (socket.AF_INET, socket.AF_INET6):
                attempts.append(f"connect({_short(address, 60)})")
                raise NetworkUsed(attempts[-1])
            return original(self, address)
        return call

    with _GUARD:
        for name in originals:
            setattr(socket, name, refuse(name))
        socket.socket.connect, socket.socket.connect_ex = guarded(connect), guarded(connect_ex)  # type: ignore[method-assign]
        try:
            yield attempts
        finally:
            for name, original in originals.items():
                setattr(socket, name, original)
            socket.socket.connect, socket.socket.connect_ex = connect, connect_ex  # type: ignore[method-assign]


# ------------------------------------------------------------------ the taskset


def _numeric(annotation: Any) -> type | None:
    """int or float when the field holds one of them (Optional allowed); None otherwise."""
    args = getattr(annotation, "__args__", None)
    candidates = [a for a in args if a is not type(None)] if args else [annotation]
    if len(candidates) == 1 and candidates[0] in (int, float) and candidates[0] is not bool:
        return candidates[0]
    return None


def _field_bounds(info: Any) -> tuple[float | None, float | None]:
    low = high = None
    for item in getattr(info, "metadata", ()):
        if getattr(item, "ge", None) is not None:
            low = item.ge
        if getattr(item, "le", None) is not None:
            high = item.le
    return low, high


def requires_runtime(fn: Any) -> bool:
    """A scoring hook that cannot run offline: it takes ``runtime`` and has no default for it."""
    try:
        parameter = inspect.signature(fn).parameters.get("runtime")
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.default is inspect.Parameter.empty


def seed_value(seed: int, group: str) -> int:
    """The seed field's value for ``group`` in the round seeded ``seed`` (a hash: consecutive round seeds share
    nothing even where a taskset draws task i from Random(seed + i)); below 2**31, so any int field takes it."""
    return int.from_bytes(hashlib.sha256(f"{TASK_NAME}|{seed}|{group}".encode()).digest()[:4], "big") >> 1


class Taskset:
    """The taskset behind one run: its config type, refusals, loading and offline scoring."""

    def __init__(self, options: VFOptions) -> None:
        self.options = options
        self.loaders = vf()
        ident = options.taskset
        try:
            self.config_type = self.loaders.taskset_config_type(ident)
            self.taskset_cls = self.loaders.taskset_class(ident)
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - the taskset's import failed: say so with its error
            raise ConfigError(f"task.taskset: verifiers could not load taskset {ident!r}: {type(exc).__name__}: {_short(str(exc), 400)}") from None
        self.fields = self.config_type.model_fields
        self._refuse_agentic()
        self._check_fields()

    # -- refusals of what cannot run as one offline reply

    def _refuse_agentic(self) -> None:
        ident = self.options.taskset
        from verifiers.v1.envs.single_agent import SingleAgentEnv

        env = self.loaders.environment_class(ident)
        if env is not SingleAgentEnv:
            raise ConfigError(
                f"task.taskset: {ident!r} is a multi-turn environment (its package exports {env.__name__}, whose Env.run() "
                "plays several turns or agents); envengineer scores one reply per prompt, offline: refused"
            )
        harness = self.loaders.default_harness_id(ident)
        if harness != "bash":
            raise ConfigError(f"task.taskset: {ident!r} ships its own harness ({harness}): an agent program, not one reply; refused")
        task_cls = self.taskset_cls.task_type()
        if getattr(task_cls, "NEEDS_CONTAINER", False):
            raise ConfigError(f"task.taskset: {ident!r}'s task {task_cls.__name__} needs a container (NEEDS_CONTAINER); refused")
        from verifiers.v1.task import Task

        for hook in ("setup", "finalize", "stage_verifier"):
            if getattr(task_cls, hook) is not getattr(Task, hook):
                raise ConfigError(
                    f"task.taskset: {ident!r}'s task {task_cls.__name__} overrides {hook}(trace, runtime): it needs a runtime "
                    "(a sandbox) around the reply; refused"
                )

    def _check_fields(self) -> None:
        o, ident = self.options, self.options.taskset
        names = [n for n in self.fields if n not in RESERVED_FIELDS]
        for role, name in (("seed_field", o.seed_field), ("size_field", o.size_field), ("groups.field", o.groups.field if o.groups else None),
                           *(("knobs", k) for k in o.knobs), *(("fixed", k) for k in o.fixed)):
            if name is not None and name not in self.fields:
                raise ConfigError(f"task.{role}: {name!r} is no field of {ident!r}'s {self.config_type.__name__} (fields: {', '.join(names) or 'none'})")
        if o.seed_field is not None and _numeric(self.fields[o.seed_field].annotation) is not int:
            raise ConfigError(f"task.seed_field: {ident!r}'s field {o.seed_field!r} is not an int")
        if o.size_field is not None and _numeric(self.fields[o.size_field].annotation) is not int:
            raise ConfigError(f"task.size_field: {ident!r}'s field {o.size_field!r} is not an int")
        try:
            self.config_type.model_validate({**o.fixed, "id": ident})
        except ValidationError as exc:
            raise ConfigError(f"task.fixed: {ident!r} refuses it: {_first_error(exc)}") from None
        if o.groups is not None:
            for value in o.groups.values:
                try:
                    self.config_type.model_validate({**o.fixed, "id": ident, o.groups.field: value})
                except ValidationError as exc:
                    raise ConfigError(f"task.groups.values: {value!r} is no value of {ident!r}'s {o.groups.field!r}: {_first_error(exc)}") from None

    def knob(self, name: str, spec: KnobSpec) -> tuple[Knob, Any]:
        """The declared knob over field ``name`` and the field's default (its value in round 0)."""
        ident, info = self.options.taskset, self.fields[name]
        kind = _numeric(info.annotation)
        where = f"task.knobs.{name}"
        if kind is None:
            raise ConfigError(f"{where}: {ident!r}'s field {name!r} is {info.annotation!r}, not a number (a knob is an int or float field)")
        field_low, field_high = _field_bounds(info)
        if spec.range is not None:
            low, high = spec.range
        elif field_low is not None and field_high is not None:
            low, high = field_low, field_high
        else:
            raise ConfigError(f"{where}: {ident!r}'s field {name!r} declares no ge/le bounds: give its range: [low, high]")
        if not (math.isfinite(low) and math.isfinite(high) and low <= high):
            raise ConfigError(f"{where}.range: needs finite low <= high, got [{low}, {high}]")
        integer = spec.integer if spec.integer is not None else kind is int
        if kind is int and not integer:
            raise ConfigError(f"{where}.integer: {name!r} is an int field")
        step = spec.step if spec.step is not None else (1 if integer else None)
        if step is None:
            raise ConfigError(f"{where}.step: {name!r} is a float field: give its step")
        for label, bound in (("low", low), ("high", high)):
            value = int(bound) if integer else float(bound)
            if integer and float(bound) != int(bound):
                raise ConfigError(f"{where}.range: {label} {bound} is not whole")
            try:
                self.config_type.model_validate({**self.options.fixed, "id": ident, name: value})
            except ValidationError as exc:
                raise ConfigError(f"{where}.range: {label} = {bound:g} is outside what {ident!r} accepts for {name!r}: {_first_error(exc)}") from None
        default = info.get_default(call_default_factory=True)
        if not isinstance(default, (int, float)) or isinstance(default, bool) or not low <= default <= high:
            raise ConfigError(f"{where}: {ident!r}'s default {name} = {default!r} is outside the declared range [{low:g}, {high:g}]")
        try:
            knob = Knob(name, low, high, step, integer=integer, harder=spec.harder, description=spec.description or f"{ident} field {name}")
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        return knob, (int(default) if integer else float(default))

    # -- loading

    def config(self, values: Mapping[str, Any], *, seed: int | None, size: int | None, group: Any = None) -> Any:
        """The TasksetConfig: the fixed fields, the knobs, the group's field, the seed and size fields; nothing else."""
        o = self.options
        data: dict[str, Any] = {**o.fixed, **values, "id": o.taskset}
        if o.groups is not None:
            data[o.groups.field] = group
        if o.seed_field is not None and seed is not None:
            data[o.seed_field] = seed
        if o.size_field is not None and size is not None:
            data[o.size_field] = size
        try:
            return self.config_type.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"taskset {o.taskset!r} refuses the config {_short(json.dumps(_plain(data)), 300)}: {_first_error(exc)}") from None

    def load(self, config: Any, n: int, *, shuffle_seed: int | None = None) -> list[Any]:
        """The first ``n`` tasks of verifiers' ``load_taskset(config)`` (shuffled by ``shuffle_seed`` with verifiers' own
        view when the run shuffles), loaded with the network refused."""
        ident = self.options.taskset
        failure: Exception | None = None
        tasks: list[Any] = []
        with no_network() as attempts:
            try:
                taskset = self.loaders.load_taskset(config)
                view = taskset.shuffle(shuffle_seed) if shuffle_seed is not None else taskset
                tasks = list(view.take(n))
            except Exception as exc:  # noqa: BLE001 - a load() assert on the config, a broken taskset, the network refused
                failure = exc
        if attempts:
            raise ConfigError(
                f"task.taskset: {ident!r} reached for the network while loading ({attempts[0]}); envengineer loads tasksets "
                "offline (rounds must be reproducible, and a run may have no network): vendor its data into the package"
            )
        if failure is not None:
            given = _short(json.dumps(_plain(config.model_dump(mode="json", exclude_defaults=True))), 300)
            raise ConfigError(f"taskset {ident!r}: load() raised {type(failure).__name__}: {_short(str(failure), 300)} (config {given})")
        return tasks

    def refuse_scoring(self, task: Any) -> None:
        """Refusals read from a loaded task: rewards needing a runtime, judges, an empty reward set."""
        ident, o = self.options.taskset, self.options
        rewards = task.hooks("reward")
        metrics = task.hooks("metric")
        for fn in (*rewards, *metrics):
            if requires_runtime(fn):
                kind = "reward" if fn in rewards else "metric"
                raise ConfigError(
                    f"task.taskset: {ident!r}'s {kind} {fn.__name__} needs a runtime (a sandbox: its signature takes `runtime`); "
                    "offline, verifiers would skip it and score 0: refused"
                )
        judges = list(task.config.judges)
        if judges:
            names = ", ".join(getattr(j, "id", type(j).__name__) or type(j).__name__ for j in judges)
            for judge in task.plugged_judges():
                if requires_runtime(judge.score):
                    raise ConfigError(f"task.taskset: {ident!r}'s judge {judge.reward_name} needs a runtime (a sandbox); refused")
            if not o.allow_judges:
                raise ConfigError(
                    f"task.taskset: {ident!r} scores with an LLM judge ({names}): each reply would cost a model call and "
                    "the reward would not be reproducible; set task.allow_judges: true to accept that"
                )
        if not rewards and not judges:
            raise ConfigError(f"task.taskset: {ident!r}'s task {type(task).__name__} has no @vf.reward (and no judge): nothing to score with")

    # -- records and scoring

    def task_of(self, record: Mapping[str, Any]) -> Any:
        """The verifiers Task a record holds (its data validated by the task's own TaskData type)."""
        task_cls = self.taskset_cls.task_type()
        data = task_cls.data_type().model_validate(record["task"])
        if not hasattr(self, "_task_config"):
            self._task_config = self.config_type.model_validate({**self.options.fixed, "id": self.options.taskset}).task
        return task_cls(data, self._task_config)

    def trace(self, task: Any, messages: list[dict[str, str]], reply: str) -> Any:
        """An offline verifiers Trace: the prompt's messages, then ``reply`` as the one sampled assistant node."""
        from verifiers.v1.configs.agent import AgentConfig
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.trace import AgentInfo, Trace, TraceTask
        from verifiers.v1.types import AssistantMessage, SystemMessage, UserMessage

        kinds = {"system": SystemMessage, "user": UserMessage, "assistant": AssistantMessage}
        nodes = [MessageNode(parent=i - 1 if i else None, message=kinds[m["role"]](content=m["content"])) for i, m in enumerate(messages)]
        nodes.append(MessageNode(parent=len(nodes) - 1 if nodes else None, message=AssistantMessage(content=reply), sampled=True))
        return Trace(task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                     agent=AgentInfo(config=AgentConfig()), nodes=nodes)

    def reward(self, task: Any, messages: list[dict[str, str]], reply: str) -> tuple[str, Any]:
        """``("ok", reward)``, ``("timeout", None)``, ``("error", message)`` or ``("empty", None)``: verifiers' own
        ``await task.score(trace)`` on a worker thread, given ``score_timeout_s``."""
        result: list[tuple[str, Any]] = []

        def work() -> None:
            try:
                trace = self.trace(task, messages, reply)
                asyncio.run(task.score(trace))
                if not trace.rewards or any(r is None for r in trace.rewards.values()):
                    result.append(("empty", None))
                else:
                    result.append(("ok", float(trace.reward)))
            except BaseException as exc:  # noqa: BLE001 - a reward that raises is the reply's verdict, never the run's end
                result.append(("error", f"{type(exc).__name__}: {_short(str(exc), 200)}"))

        thread = threading.Thread(target=work, name="verifiers-score", daemon=True)
        thread.start()
        thread.join(self.options.score_timeout_s)
        if thread.is_alive() or not result:
            return "timeout", None
        return result[0]


# ------------------------------------------------------------------ the family


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


def messages_of(data: Mapping[str, Any]) -> list[dict[str, str]]:
    """A task's prompt as chat messages: its system prompt, then its prompt (a string: one user message)."""
    messages = []
    if data.get("system_prompt"):
        messages.append({"role": "system", "content": str(data["system_prompt"])})
    prompt = data.get("prompt")
    if isinstance(prompt, str):
        messages.append({"role": "user", "content": prompt})
    elif isinstance(prompt, list):
        for message in prompt:
            if isinstance(message, Mapping):
                messages.append({"role": str(message.get("role", "user")), "content": _text(message.get("content"))})
    return messages


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n\n".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping) and part.get("type") == "text")
    return "" if content is None else str(content)


class VFValidator(Validator):
    name: ClassVar[str] = TASK_NAME
    #: The generator's: the registry makes the validator with the run's task section (Registry.validator_for).
    Options: ClassVar[type[BaseModel]] = VFOptions
    failure_types: ClassVar[tuple[str, ...]] = ("too_long", "bad_record", "reward_error", "reward_timeout", "no_reward", "zero", "partial")

    def __init__(self, options: BaseModel | None = None) -> None:
        if options is None:
            raise ConfigError(f"task {TASK_NAME}: needs task.taskset and task.knobs (docs/verifiers.md)")
        super().__init__(options)
        self.taskset = Taskset(self.options)  # type: ignore[arg-type]

    def score(self, record: Mapping[str, Any], response: str) -> Verdict:
        o = self.options
        response = response if isinstance(response, str) else str(response)
        if len(response) > o.max_answer_chars:
            return Verdict(False, False, "too_long", ("too_long",))
        try:
            task = self.taskset.task_of(record)
        except Exception:  # noqa: BLE001 - a malformed record
            return Verdict(False, False, "bad_record", ("bad_record",))
        status, value = self.taskset.reward(task, messages_of(record.get("task") or {}), response)
        if status != "ok":
            kind = {"timeout": "reward_timeout", "empty": "no_reward"}.get(status, "reward_error")
            return Verdict(False, False, kind, (kind,))
        if not math.isfinite(value):
            return Verdict(False, False, "reward_error", ("reward_error",))
        worst, best = o.reward_range
        score = min(1.0, max(0.0, (value - worst) / (best - worst)))
        valid = value >= o.valid_threshold
        optimal = valid and value >= best
        if valid:
            return Verdict(True, optimal, None, (), score=score)
        kind = "zero" if value <= worst else "partial"
        return Verdict(False, False, kind, (kind,), score=score)


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return _short(str(exc), 200)
    where = ".".join(map(str, errors[0].get("loc", ())))
    return f"{where + ': ' if where else ''}{errors[0].get('msg')}"


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _short(value: Any, limit: int = 80) -> str:
    try:
        text = value if isinstance(value, str) else repr(value)
    except Exception:  # noqa: BLE001
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


@hookimpl
def register_generators(register):
    register(VFGenerator)


@hookimpl
def register_validators(register):
    register(VFValidator)
