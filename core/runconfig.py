"""The run config: one YAML file that says what a run does.

The top level is checked here; each plugin checks its own section (``task``,
``engineer``, ``trainer``, ``policy``, ``context``), so an error names the full path:
``engineer.openai.modle: Extra inputs are not permitted``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from envengineer.errors import ConfigError
from envengineer.fileio import read_yaml
from envengineer.registry import Registry, format_validation_error


def _named(section: Any, where: str) -> dict[str, Any]:
    if isinstance(section, str):
        return {"name": section}
    if not isinstance(section, dict) or not isinstance(section.get("name"), str):
        raise ValueError(f"{where} must be a mapping with a 'name' (or just the name)")
    return dict(section)


class EvalSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    validation: str = Field("mapf-2agents-val", description="benchmark used as the loop's evidence")
    benchmarks: list[str] = Field(default_factory=list, description="held-out benchmarks")
    bench_rounds: Literal["last", "all", "none"] = Field("last", description="when to run the benchmarks (always on the base policy too, unless none)")
    limit: int | None = Field(None, ge=1, description="evaluate N instances of each set, evenly spread over it")
    examples: int = Field(8, ge=0, le=64, description="failing examples kept for the F context module")


class DesignSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reask: int = Field(1, ge=0, le=5, description="re-asks quoting the problem before falling back")
    prompt_file: str | None = Field(None, description="your own analysis prompt template")
    summary: bool = Field(True, description="ask the engineer for the S note after each design")
    max_fallbacks: int | None = Field(
        2, ge=1,
        description="stop the run after this many consecutive fallbacks of an LLM engineer (null: never stop)",
    )


class SuiteSection(BaseModel):
    """Where ``envengineer suite`` shows the run; never part of the run itself."""

    model_config = ConfigDict(extra="forbid")

    table: str = Field(min_length=1, description="the table this run is a row of, e.g. 'context variants'")
    row: str | None = Field(None, min_length=1, description="the row's label (default: the run's name)")
    order: int = Field(0, description="rows sort by order, then by config file name")


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    task: dict[str, Any] = Field(default_factory=lambda: {"name": "mapf-frozenlake"})
    rounds: int = Field(3, ge=1, le=1000)
    seed: int = 0
    budget: int = Field(4000, ge=1, description="training instances per round")
    initial_config: str | None = Field(None, description="uniform | random | path/to/config.yaml; the same setting as context.start, give one (default: the context preset's)")
    context: dict[str, Any] | str = Field(default_factory=lambda: {"preset": "V6"})
    engineer: dict[str, Any] = Field(default_factory=lambda: {"name": "heuristic"})
    policy: dict[str, Any] = Field(default_factory=lambda: {"name": "tiny"})
    trainer: dict[str, Any] = Field(default_factory=lambda: {"name": "trl"})
    eval: EvalSection = Field(default_factory=EvalSection)
    design: DesignSection = Field(default_factory=DesignSection)
    output: str | None = Field(None, description="run directory (default: runs/<name>)")
    # Excluded from run.yaml: relabelling a row must not make a run directory "a different run".
    suite: SuiteSection | None = Field(None, exclude=True, description="table and row for `envengineer suite`")

    @field_validator("task", "engineer", "policy", "trainer", mode="before")
    @classmethod
    def _name_or_mapping(cls, value: Any, info: Any) -> dict[str, Any]:
        return _named(value, info.field_name)


@dataclass
class ResolvedRun:
    """A run config with every plugin section validated and instantiated."""

    config: RunConfig
    generator: Any
    validator: Any
    engineer: Any
    policy: Any
    trainer: Any
    context: Any
    run_dir: Path
    context_initial: str = "uniform"  # the round-0 config: initial_config, context.start or the preset's


def _section(registry: Registry, kind: str, section: dict[str, Any], where: str) -> Any:
    name = section["name"]
    options = {k: v for k, v in section.items() if k != "name"}
    return registry.create(kind, name, options, where=f"{where}.{name}")


def parse_run_config(data: Any, source: str = "run config") -> RunConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}:\n{format_validation_error(exc)}") from None


def resolve(config: RunConfig, registry: Registry, *, base_dir: Path | None = None) -> ResolvedRun:
    """Instantiate every component; each section's errors name their path."""
    from envengineer.evidence import choose_start, parse_context_spec

    task_options = dict(config.task)
    generator = registry.create("generator", task_options["name"], task_options, where="task")
    validator = registry.get("validator", task_options["name"])()
    engineer = _section(registry, "engineer", config.engineer, "engineer")
    policy = _section(registry, "policy", config.policy, "policy")
    trainer = _section(registry, "trainer", config.trainer, "trainer")
    try:
        context = parse_context_spec(config.context)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, "context")) from None
    except ValueError as exc:
        raise ConfigError(f"context: {exc}") from None
    for name in [config.eval.validation, *config.eval.benchmarks]:
        registry.entry("benchmark", name)
    base = base_dir or Path.cwd()
    run_dir = Path(config.output) if config.output else Path("runs") / config.name
    if not run_dir.is_absolute():
        run_dir = base / run_dir
    initial = choose_start(context, config.initial_config, generator)
    return ResolvedRun(config, generator, validator, engineer, policy, trainer, context, run_dir, initial)


def load_run_config(path: str | Path) -> RunConfig:
    return parse_run_config(read_yaml(path), str(path))
