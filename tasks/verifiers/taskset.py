"""The taskset behind a verifiers run: verifiers reached (:func:`vf`, or a ConfigError saying what to install), its
config type read, what cannot run as one offline reply refused, tasks loaded with the network refused
(:func:`no_network`), and a reply scored by the taskset's own rewards (:class:`Taskset`)."""

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
from typing import Any

from pydantic import ValidationError

from envengineer.api import ConfigError, Knob
from envengineer.tasks.verifiers import INSTALL_HINT, PINNED_VERSION, TASK_NAME
from envengineer.tasks.verifiers.knobs import RESERVED_FIELDS, KnobSpec, VFOptions

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
