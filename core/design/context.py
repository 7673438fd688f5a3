"""Which context modules an engineer reads, and their blocks joined into one context.

:class:`ContextSpec` is the run config's ``context:`` section: a preset (V1…V6, the paper's
variants) or a list of modules, the T mode, the round-0 start and per-module options.
:func:`resolve_context` turns it into the modules in prompt order; :func:`compose_context`
renders each module (a registered plugin) on an :class:`~envengineer.design.evidence.Evidence`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from envengineer.errors import ConfigError

if TYPE_CHECKING:
    from envengineer.design.evidence import Evidence

MODULE_NAMES = ("F", "G", "H", "S", "T")

#: Our reading of the paper's six context variants (docs/context.md). The paper's summary
#: fixes only V4 (no random round-0 config), V5/V6 (add S) and V6 = V4 + S + T; the rest is
#: our reading: V1–V3 start from a random round-0 config and add one module each, V4 is V3
#: started from the uniform config. ``start`` is the round-0 config; the other reading of V4
#: (random start, round 0 left out of the history) is ``{preset: V4, start: random,
#: options: {H: {omit_round0: true}}}``.
PRESETS: dict[str, dict[str, Any]] = {
    "V1": {"modules": ["F"], "T": None, "start": "random"},
    "V2": {"modules": ["F", "G"], "T": None, "start": "random"},
    "V3": {"modules": ["F", "G", "H"], "T": None, "start": "random"},
    "V4": {"modules": ["F", "G", "H"], "T": None, "start": "uniform"},
    "V5": {"modules": ["F", "G", "H", "S"], "T": None, "start": "uniform"},
    "V6": {"modules": ["F", "G", "H", "S", "T"], "T": "bookkeeping", "start": "uniform"},
}
#: Round-0 starts every task has; anything else given as a start is a config file's path.
BUILTIN_STARTS = ("uniform", "random")
_START_CHOICES = "give uniform, random or the path of a generator config file"
DEFAULT_PRESET = "V6"


class ContextSpec(BaseModel):
    """The run config's ``context:`` section: ``{preset: V6}`` or ``{modules: [F, G, H, S], T: bookkeeping}``.

    ``T`` given with a preset overrides the preset's T mode (``{preset: V6, T: full}``)
    and adds T when the preset lacks it. ``start`` overrides the preset's round-0 config
    (``uniform``, ``random`` or a config file). ``options`` passes options to a module by
    name (``{F: {examples: 5}, H: {omit_round0: true}}``).
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    preset: Literal["V1", "V2", "V3", "V4", "V5", "V6"] | None = None
    modules: list[str] | None = Field(None, description="context modules in prompt order")
    T: Literal["full", "bookkeeping"] | None = Field(None, description="training-detail mode; adds T to the modules")
    start: str | None = Field(None, description="round-0 config: uniform | random | path/to/config.yaml (default: the preset's; uniform for a module list)")
    options: dict[str, dict[str, Any]] = Field(default_factory=dict, description="per-module options by module name")
    order: Literal["paper", "stable-first"] = Field(
        "paper", description="paper: the modules in the order given (the analysis prompt's round line before them); "
        "stable-first: the blocks that stay the same between rounds first (G, then H's history, then F, S, T) and the "
        "analysis prompt's round-specific lines after them, so a server's prompt cache reuses the longest prefix",
    )

    @field_validator("start")
    @classmethod
    def _start_named(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError(_START_CHOICES)
        return value.strip() if value is not None else None

    @model_validator(mode="after")
    def _one_choice(self) -> "ContextSpec":
        if self.preset is not None and self.modules is not None:
            raise ValueError("give either preset or modules, not both")
        if self.modules is not None:
            seen = set()
            for name in self.modules:
                if name in seen:
                    raise ValueError(f"module {name!r} is listed twice")
                seen.add(name)
        return self


def parse_context_spec(spec: ContextSpec | dict[str, Any] | str | None) -> ContextSpec:
    """A :class:`ContextSpec` from the section (a dict), a preset name, or None (the default preset)."""
    if isinstance(spec, ContextSpec):
        return spec
    if spec is None:
        return ContextSpec(preset=DEFAULT_PRESET)
    if isinstance(spec, str):
        spec = {"preset": spec}
    from envengineer.registry import validate_options

    return validate_options(ContextSpec, spec, "context")  # type: ignore[return-value]


def resolve_context(spec: ContextSpec | dict[str, Any] | str | None) -> tuple[list[tuple[str, dict[str, Any]]], str]:
    """The modules (name, options) in prompt order, and the context's round-0 start
    ("uniform", "random" or a config file's path; see :func:`choose_start` for the run's)."""
    spec = parse_context_spec(spec)
    if spec.modules is None:
        preset = PRESETS[spec.preset or DEFAULT_PRESET]
        names = list(preset["modules"])
        t_mode = spec.T or preset["T"]
        start = spec.start or preset["start"]
    else:
        names = list(spec.modules)
        t_mode = spec.T
        start = spec.start or "uniform"
    if t_mode is not None and "T" not in names:
        names.append("T")
    resolved = []
    for name in names:
        options = dict(spec.options.get(name, {}))
        if name == "T":
            options.setdefault("mode", t_mode or "bookkeeping")
        resolved.append((name, options))
    unknown = set(spec.options) - set(names)
    if unknown:
        raise ConfigError(f"context.options: options for modules not in use: {', '.join(sorted(unknown))}")
    return resolved, start


def choose_start(spec: ContextSpec | dict[str, Any] | str | None, initial_config: str | None = None, generator: Any = None) -> str:
    """The run's round-0 config: the run config's ``initial_config`` or ``context.start``
    (the same setting, give at most one), else the preset's start.

    With ``generator``, a config file is read and validated now, so a bad path fails before
    any training rather than at round 0.
    """
    spec = parse_context_spec(spec)
    _, start = resolve_context(spec)
    where = "context.start"
    if initial_config is not None:
        if spec.start is not None and spec.start != initial_config.strip():
            raise ConfigError(
                f"initial_config: {initial_config!r} disagrees with context.start {spec.start!r}; "
                "they are the same setting, give it once"
            )
        start, where = initial_config.strip(), "initial_config"
    if not start:
        raise ConfigError(f"{where}: {_START_CHOICES}")
    if generator is not None and start not in BUILTIN_STARTS:
        if not Path(start).is_file():
            raise ConfigError(f"{where}: {start}: no such file ({_START_CHOICES})")
        from envengineer.store.configs import load_generator_config

        load_generator_config(generator, start)  # raises ConfigError naming the file and field
    return start


def create_module(registry: Any, name: str, options: dict[str, Any]) -> Any:
    """The context module ``name`` with ``options`` (errors name ``context.options.<name>``)."""
    return registry.create("context_module", name, options, where=f"context.options.{name}")


#: The prompt order of ``order: stable-first``: a module's :attr:`~envengineer.api.ContextModule.stability`.
STABILITY_ORDER = ("run", "history", "round")


def ordered_modules(registry: Any, spec: ContextSpec | dict[str, Any] | str | None) -> list[tuple[str, dict[str, Any]]]:
    """The modules (name, options) in the order the prompt shows them: :func:`resolve_context`'s, or with
    ``order: stable-first`` sorted (stably) by how much of each block stays the same between rounds."""
    spec = parse_context_spec(spec)
    modules, _ = resolve_context(spec)
    if spec.order == "paper":
        return modules

    def rank(item: tuple[str, dict[str, Any]]) -> int:
        stability = getattr(registry.get("context_module", item[0]), "stability", "round")
        return STABILITY_ORDER.index(stability) if stability in STABILITY_ORDER else len(STABILITY_ORDER) - 1

    return sorted(modules, key=rank)


def analysis_template(spec: ContextSpec | dict[str, Any] | str | None) -> str:
    """The built-in analysis prompt for the context's order: ``analysis`` or ``analysis-stable-first``."""
    return "analysis" if parse_context_spec(spec).order == "paper" else "analysis-stable-first"


def compose_context(registry: Any, spec: ContextSpec | dict[str, Any] | str | None, evidence: Evidence) -> str:
    """Render each chosen module and join the non-empty blocks under headings, in :func:`ordered_modules`' order."""
    modules = ordered_modules(registry, spec)
    blocks = []
    for name, options in modules:
        module = create_module(registry, name, options)
        text = module.render(evidence).strip()
        if text:
            title = getattr(module, "title", "") or name
            blocks.append(f"## {title} ({name})\n\n{text}")
    return "\n\n".join(blocks) + ("\n" if blocks else "")
