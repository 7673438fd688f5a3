"""The registry: what the plugins registered, who registered it, and how to build it.

Components are collected by calling each plugin's ``register_*`` hook with a
``register`` callback bound to that plugin, so every entry knows its owner and a
duplicate name fails with both owners named.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from envengineer.components import KINDS, Benchmark, Component, NoOptions
from envengineer.errors import ConfigError, RegistrationError, UnknownComponentError
from envengineer.plugin_manager import PluginManager, create_plugin_manager

HOOKS: dict[str, str] = {
    "generator": "register_generators",
    "validator": "register_validators",
    "benchmark": "register_benchmarks",
    "context_module": "register_context_modules",
    "engineer": "register_engineers",
    "trainer": "register_trainers",
    "policy": "register_policies",
    "tracker": "register_trackers",
}


@dataclass(frozen=True)
class Entry:
    kind: str
    name: str
    obj: Any  # a Component subclass, or a Benchmark
    owner: str  # plugin name
    origin: str  # "builtin" or "distribution version"

    @property
    def description(self) -> str:
        return getattr(self.obj, "description", "") or ""


def _bases() -> dict[str, type]:
    """The base class each kind of component must subclass."""
    from envengineer.components import Tracker

    return {**KINDS, "tracker": Tracker}


def format_validation_error(exc: ValidationError, where: str = "") -> str:
    """One line per problem, each naming the full field path (``engineer.openai.model``)."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(part) for part in (where, *err["loc"]) if part != "")
        lines.append(f"{loc or '<root>'}: {err['msg']}")
    return "\n".join(lines)


def validate_options(model: type[BaseModel], data: Any, where: str) -> BaseModel:
    """Validate a section against its pydantic model; errors name ``where.field``."""
    try:
        return model.model_validate({} if data is None else data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, where)) from None


class Registry:
    """Every registered component, by kind and name."""

    def __init__(self, pm: PluginManager) -> None:
        self.pm = pm
        self._entries: dict[str, dict[str, Entry]] = {kind: {} for kind in HOOKS}
        for kind, hook_name in HOOKS.items():
            hook = getattr(pm.hook, hook_name)
            for impl in hook.get_hookimpls():
                self._call(kind, impl)

    def _call(self, kind: str, impl: Any) -> None:
        owner = impl.plugin_name
        origin = getattr(self.pm, "origins", {}).get(owner, "runtime")

        def register(obj: Any) -> None:
            self._add(kind, obj, owner, origin)

        impl.function(**{name: register for name in impl.argnames if name == "register"})

    def _add(self, kind: str, obj: Any, owner: str, origin: str) -> None:
        if kind == "benchmark":
            if not isinstance(obj, Benchmark):
                raise RegistrationError(
                    f"plugin {owner!r}: register_benchmarks must register Benchmark instances, got {obj!r}"
                )
        else:
            base = _bases()[kind]
            if not (isinstance(obj, type) and issubclass(obj, base)):
                raise RegistrationError(
                    f"plugin {owner!r}: {HOOKS[kind]} must register subclasses of {base.__name__}, got {obj!r}"
                )
        name = getattr(obj, "name", "")
        if not isinstance(name, str) or not name:
            raise RegistrationError(f"plugin {owner!r}: {obj!r} has no name")
        existing = self._entries[kind].get(name)
        if existing is not None:
            raise RegistrationError(
                f"{kind} {name!r} is registered twice: by plugin {existing.owner!r} "
                f"({existing.origin}) and by plugin {owner!r} ({origin})"
            )
        self._entries[kind][name] = Entry(kind, name, obj, owner, origin)

    # ------------------------------------------------------------------ lookup

    def names(self, kind: str) -> list[str]:
        return sorted(self._entries[kind])

    def entries(self, kind: str | None = None) -> list[Entry]:
        kinds = [kind] if kind else list(HOOKS)
        return [self._entries[k][n] for k in kinds for n in sorted(self._entries[k])]

    def entry(self, kind: str, name: str) -> Entry:
        try:
            return self._entries[kind][name]
        except KeyError:
            known = ", ".join(self.names(kind)) or "none"
            label = kind.replace("_", " ")
            raise UnknownComponentError(f"unknown {label} {name!r} (registered: {known})") from None

    def get(self, kind: str, name: str) -> Any:
        return self.entry(kind, name).obj

    def create(self, kind: str, name: str, options: Mapping[str, Any] | BaseModel | None = None, *, where: str = "") -> Any:
        """Validate ``options`` against the component's ``Options`` and instantiate it.

        A ``name`` among the options that names this component (a run config's ``task:`` section)
        is the section's selector: an ``Options`` model need not declare it."""
        cls: type[Component] = self.get(kind, name)
        if isinstance(options, BaseModel):
            opts = options
        else:
            section = dict(options or {})
            if section.get("name") == name and "name" not in cls.Options.model_fields:
                del section["name"]
            opts = validate_options(cls.Options, section, where or f"{kind}.{name}")
        instance = cls(opts)
        binder = getattr(instance, "bind_registry", None)
        if callable(binder):  # a component made of other components (the critic engineer) creates them through this registry
            binder(self, where or f"{kind}.{name}")
        return instance

    def benchmark(self, name: str) -> Benchmark:
        return self.get("benchmark", name)

    def task(self, name: str, options: Mapping[str, Any] | None = None, *, where: str = "task") -> tuple[Any, Any]:
        """The (generator, validator) pair of a task family."""
        generator = self.create("generator", name, options, where=where)
        return generator, self.validator_for(generator)

    def validator_for(self, generator: Any) -> Any:
        """The validator paired with ``generator``: made with the generator's options when it declares the same
        ``Options`` model (a family whose scoring depends on the run's task section), else with none."""
        validator_cls = self.get("validator", generator.name)
        options_model = getattr(validator_cls, "Options", None)
        if options_model is not None and options_model is not NoOptions and options_model is type(generator).Options:
            return validator_cls(generator.options)
        return validator_cls()


def load_registry(pm: PluginManager | None = None, **factory_kwargs: Any) -> Registry:
    """A registry over a fresh plugin manager (or the one given)."""
    return Registry(pm if pm is not None else create_plugin_manager(**factory_kwargs))
