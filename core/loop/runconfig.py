"""The run config: one YAML file that says what a run does.

The top level is checked here; each plugin checks its own section (``task``,
``engineer``, ``trainer``, ``policy``, ``context``), so an error names the full path:
``engineer.openai.modle: Extra inputs are not permitted``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from envengineer.errors import ConfigError, UnknownComponentError
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

    validation: str | None = Field(
        None, description="benchmark used as the loop's evidence (default: the one the task declares, Generator.validation_benchmark)",
    )
    benchmarks: list[str] = Field(default_factory=list, description="held-out benchmarks")
    bench_rounds: Literal["last", "all", "none"] = Field("last", description="when to run the benchmarks (always on the base policy too, unless none)")
    limit: int | None = Field(None, ge=1, description="evaluate N instances of each set, evenly spread over it")
    examples: int = Field(8, ge=0, le=64, description="failing examples kept for the F context module")
    sampled: int = Field(
        0, ge=0, le=64, description="also sample this many answers per validation instance at the trainer's temperature "
        "and report sampled pass@1 beside the greedy valid rate (0: off)",
    )


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
    task: dict[str, Any] = Field(
        description="the task family and its options: {name: FAMILY, ...} or just FAMILY; may be left out only when "
        "exactly one task family is installed (parse_run_config fills it in)",
    )
    rounds: int = Field(3, ge=1, le=1000)
    seed: int = 0
    budget: int = Field(4000, ge=1, description="training instances per round (budget_mode instances), or prompts with mixed outcomes to keep (kept_prompts)")
    budget_mode: Literal["instances", "kept_prompts"] = Field(
        "instances", description="instances: a round trains on `budget` fresh instances; kept_prompts: the trainer draws fresh "
        "instances from the same config until `budget` prompts with mixed sampled outcomes are kept (equal optimizer steps across engineers)",
    )
    draw_cap: float = Field(10.0, ge=1.0, description="kept_prompts: at most draw_cap × budget instances judged a round (the cap is recorded when it stops the filling)")
    initial_config: str | None = Field(None, description="uniform | random | path/to/config.yaml; the same setting as context.start, give one (default: the context preset's)")
    context: dict[str, Any] | str = Field(default_factory=lambda: {"preset": "V6"})
    engineer: dict[str, Any] = Field(default_factory=lambda: {"name": "heuristic"})
    policy: dict[str, Any] = Field(default_factory=lambda: {"name": "tiny"})
    trainer: dict[str, Any] = Field(default_factory=lambda: {"name": "trl"})
    eval: EvalSection = Field(default_factory=EvalSection)
    design: DesignSection = Field(default_factory=DesignSection)
    output: str | None = Field(None, description="run directory (default: runs/<name>)")
    trackers: list[str | dict[str, Any]] = Field(
        default_factory=list,
        description="experiment trackers the run also logs to (tensorboard, wandb, mlflow, or a plugin's): a name, or "
        "{name: NAME, ...its options}; never part of what the run produces (a resumed run may change them)",
    )
    # Excluded from run.yaml: relabelling a row must not make a run directory "a different run".
    suite: SuiteSection | None = Field(None, exclude=True, description="table and row for `envengineer suite`")

    @field_validator("task", "engineer", "policy", "trainer", mode="before")
    @classmethod
    def _name_or_mapping(cls, value: Any, info: Any) -> dict[str, Any]:
        return _named(value, info.field_name)

    @field_validator("trackers", mode="before")
    @classmethod
    def _tracker_list(cls, value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, (str, dict)):  # one tracker: trackers=wandb on the command line
            value = [value]
        if not isinstance(value, list):
            raise ValueError("a list of tracker names (or {name: ..., options} mappings), e.g. [tensorboard, wandb]")
        seen: set[str] = set()
        for index, item in enumerate(value):
            name = _named(item, f"trackers[{index}]")["name"]
            if name in seen:
                raise ValueError(f"{name} is listed twice")
            seen.add(name)
        return value

    def tracker_sections(self) -> list[dict[str, Any]]:
        """``trackers`` with every entry as a mapping with a ``name``."""
        return [_named(item, f"trackers[{index}]") for index, item in enumerate(self.trackers)]


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
    trackers: list[Any] = field(default_factory=list)  # the run's experiment trackers (envengineer.components.roles.Tracker)


def _section(registry: Registry, kind: str, section: dict[str, Any], where: str) -> Any:
    name = section["name"]
    options = {k: v for k, v in section.items() if k != "name"}
    return registry.create(kind, name, options, where=f"{where}.{name}")


def task_families(registry: Registry) -> list[str]:
    """The installed task families: every registered generator's name."""
    return registry.names("generator")


def only_task(registry: Registry, where: str = "task") -> str:
    """The one installed task family, for a run config or command that names none; else an error
    naming ``where`` (the field or option) and listing the installed families."""
    families = task_families(registry)
    if len(families) == 1:
        return families[0]
    if not families:
        raise ConfigError(f"{where}: required, and no task family is installed (see `envengineer plugins`)")
    raise ConfigError(
        f"{where}: required when more than one task family is installed; name one of: {', '.join(families)}"
    )


def _with_task(data: dict[str, Any], source: str, registry: Registry | None) -> dict[str, Any]:
    """``data`` with ``task`` (or its ``name``) filled in when it names none (left out, empty, or a
    mapping of options without ``name``) and exactly one task family is installed."""
    task = data.get("task")
    if task is not None and not (isinstance(task, dict) and "name" not in task):
        return data
    if registry is None:
        from envengineer.registry import load_registry

        registry = load_registry()
    where = "task" if task is None else "task.name"
    try:
        name = only_task(registry, where)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return {**data, "task": {"name": name} if task is None else {"name": name, **task}}


def parse_run_config(data: Any, source: str = "run config", registry: Registry | None = None) -> RunConfig:
    """Validate a run config. Without ``task`` (or without ``task.name``) it runs the one installed
    task family (from ``registry``, loaded when needed); with several installed, that is an error
    naming the field and listing them."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    data = _with_task(data, source, registry)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}:\n{format_validation_error(exc)}") from None


def validation_set(config: RunConfig, registry: Registry | None = None) -> str | None:
    """The run's validation set: ``eval.validation`` when set, else the one its task declares
    (``Generator.validation_benchmark``); None when neither names one or the task is not installed."""
    if config.eval.validation:
        return config.eval.validation
    task = config.task.get("name")
    if registry is None or task not in registry.names("generator"):
        return None
    return registry.get("generator", task).validation_benchmark


def with_validation_set(config: RunConfig, registry: Registry) -> RunConfig:
    """``config`` with ``eval.validation`` filled in from the task's declaration (an explicit
    setting wins); a clear error naming the field when neither gives one."""
    if config.eval.validation:
        return config
    name = validation_set(config, registry)
    if not name:
        task = config.task.get("name")
        own = [e.name for e in registry.entries("benchmark") if e.obj.task == task]
        hint = f" (its benchmarks: {', '.join(own)})" if own else f" (task {task} registers no benchmark)"
        raise ConfigError(
            f"eval.validation: not set, and task {task} declares no validation benchmark "
            f"(Generator.validation_benchmark); name the set the loop evaluates on{hint}"
        )
    return config.model_copy(update={"eval": config.eval.model_copy(update={"validation": name})})


def check_eval_sets(config: RunConfig, registry: Registry, task: str) -> None:
    """Every evaluation set exists and belongs to the run's task (its records are that task's)."""
    sets = [("eval.validation", config.eval.validation)] + [("eval.benchmarks", name) for name in config.eval.benchmarks]
    for where, name in sets:
        try:
            bench = registry.benchmark(name)
        except UnknownComponentError as exc:
            raise UnknownComponentError(f"{where}: {exc}") from None
        if bench.task != task:
            own = [e.name for e in registry.entries("benchmark") if e.obj.task == task]
            hint = f" (its benchmarks: {', '.join(own)})" if own else f" (task {task} registers no benchmark)"
            raise ConfigError(f"{where}: {name} is a {bench.task} benchmark; this run's task is {task}{hint}")


def resolve(config: RunConfig, registry: Registry, *, base_dir: Path | None = None) -> ResolvedRun:
    """Instantiate every component; each section's errors name their path."""
    from envengineer.design.context import choose_start, parse_context_spec

    task_options = dict(config.task)
    generator = registry.create("generator", task_options["name"], task_options, where="task")
    validator = registry.validator_for(generator)
    engineer = _section(registry, "engineer", config.engineer, "engineer")
    policy = _section(registry, "policy", config.policy, "policy")
    trainer = _section(registry, "trainer", config.trainer, "trainer")
    problem = generator.style_problem(policy.prompt_style)
    if problem:
        raise ConfigError(f"policy.{policy.name}.prompt_style: {problem}")
    if config.budget_mode not in trainer.budget_modes:
        raise ConfigError(
            f"budget_mode: trainer {trainer.name!r} supports {', '.join(trainer.budget_modes)}, not {config.budget_mode!r}"
        )
    try:
        context = parse_context_spec(config.context)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, "context")) from None
    except ValueError as exc:
        raise ConfigError(f"context: {exc}") from None
    config = with_validation_set(config, registry)
    check_eval_sets(config, registry, generator.name)
    base = base_dir or Path.cwd()
    run_dir = Path(config.output) if config.output else Path("runs") / config.name
    if not run_dir.is_absolute():
        run_dir = base / run_dir
    initial = choose_start(context, config.initial_config, generator)
    trackers = [_tracker(registry, section, index) for index, section in enumerate(config.tracker_sections())]
    return ResolvedRun(config, generator, validator, engineer, policy, trainer, context, run_dir, initial, trackers)


def _tracker(registry: Registry, section: dict[str, Any], index: int) -> Any:
    name = section["name"]
    if name not in registry.names("tracker"):
        known = ", ".join(registry.names("tracker")) or "none"
        raise UnknownComponentError(f"trackers[{index}]: unknown tracker {name!r} (registered: {known})")
    return _section(registry, "tracker", section, f"trackers[{index}]")


#: Sections that may be written as just a name (``engineer: heuristic``).
NAMED_SECTIONS = ("task", "engineer", "policy", "trainer")


def apply_overrides(data: Any, overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``data`` with dotted ``KEY.SUB=VALUE`` overrides applied, as Hydra-configured trainers take them.

    A value is read as YAML (``seed=2``, ``trainer.beta=0.01``, ``engineer={name: fixed}``);
    a section written as just a name becomes ``{name: ...}`` before a dotted key goes into
    it. The result is validated exactly like a file, so a typo names its field.
    """
    import copy

    import yaml

    result = copy.deepcopy(data) if isinstance(data, dict) else {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(part.strip() for part in parts):
            raise ConfigError(f"override {item!r}: expected KEY=VALUE, e.g. seed=2 or engineer.name=fixed")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {item!r}: the value is not YAML ({' '.join(str(exc).split())})") from None
        node = result
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif isinstance(child, str) and depth == 0 and part in NAMED_SECTIONS:
                child = node[part] = {"name": child}
            elif not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise ConfigError(f"override {item!r}: {where} is {child!r}, not a mapping; set {where}=... as a whole")
            node = child
        node[parts[-1]] = value
    return result


#: Fields of a run config that name a file the run reads as part of its definition: written relative to the
#: file that names them (a run config, a manifest). Plugins add their own with ``json_schema_extra={"relative_to":
#: "config"}`` on an option (e.g. the LLM engineer's ``summary_prompt_file``). Places a run writes to or reads
#: data from (``output``, ``policy.path``, cache and log folders) stay relative to the working directory.
CONFIG_PATH_FIELDS = ("initial_config", "context.start", "design.prompt_file")
#: Sections whose plugin options may declare config-relative paths: section -> component kind.
PLUGIN_SECTIONS = {"task": "generator", "engineer": "engineer", "policy": "policy", "trainer": "trainer"}


def _get(data: Any, key: str) -> Any:
    for part in key.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def _set(data: dict[str, Any], key: str, value: Any) -> None:
    *parents, last = key.split(".")
    for part in parents:
        data = data[part]
    data[last] = value


def config_path_fields(data: Any, registry: Registry | None = None) -> list[str]:
    """The dotted keys of ``data`` that name a file relative to the config: :data:`CONFIG_PATH_FIELDS` and the
    options of its plugin sections marked ``relative_to: config`` (those of components ``registry`` knows)."""
    keys = list(CONFIG_PATH_FIELDS)
    if registry is None or not isinstance(data, dict):
        return keys
    for section, kind in PLUGIN_SECTIONS.items():
        value = data.get(section)
        if not isinstance(value, dict) or value.get("name") not in registry.names(kind):
            continue
        options = getattr(registry.get(kind, value["name"]), "Options", None)
        for name, info in (getattr(options, "model_fields", None) or {}).items():
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            if extra.get("relative_to") == "config":
                keys.append(f"{section}.{name}")
    return keys


def _names_file(value: Any) -> bool:
    """A string naming a file rather than a word (``uniform``, ``random``, a preset)."""
    return isinstance(value, str) and bool(value.strip()) and (
        "/" in value or "\\" in value or value.strip().lower().endswith((".yaml", ".yml", ".json", ".md", ".txt")))


def rebase(value: str, folder: Path, where: str) -> str:
    """``value``, a path written in a file in ``folder``, as a path from the working directory: relative when it
    lies under it (so a config run from the repository root names the same path as before), else absolute.
    A path that exists only from the working directory (configs written before paths were relative to their
    file) still works, with a warning naming the field."""
    import os
    import warnings

    path = Path(value.strip()).expanduser()
    if path.is_absolute():
        return str(path)
    here = Path(os.path.normpath(folder / path))
    if not here.exists() and path.exists() and Path(os.path.normpath(folder)) != Path("."):
        warnings.warn(
            f"{where}: {value} is found from the working directory, not from {folder}; paths in a config are "
            f"relative to the file that names them (write {os.path.relpath(path, folder)})", FutureWarning, stacklevel=2)
        return str(path)
    absolute = Path(os.path.abspath(here))
    cwd = Path.cwd()
    return str(absolute.relative_to(cwd)) if absolute.is_relative_to(cwd) else str(absolute)


def rebase_paths(data: Any, folder: Path, source: str, registry: Registry | None = None,
                 only: Any = None) -> Any:
    """``data`` (a run config's mapping) with its config-relative paths (:func:`config_path_fields`) rebased from
    ``folder``, the folder of the file that wrote them (``only``: a predicate on the dotted key, e.g. the keys a
    manifest's overrides set); the other values unchanged. Errors and warnings name ``source`` and the field."""
    import copy

    if not isinstance(data, dict):
        return data
    data = copy.deepcopy(data)
    for key in config_path_fields(data, registry):
        value = _get(data, key)
        if _names_file(value) and (only is None or only(key)):
            _set(data, key, rebase(value, folder, f"{source}: {key}"))
    return data


def override_keys(overrides: list[str] | tuple[str, ...]) -> Any:
    """A predicate: does one of ``overrides`` (``KEY=VALUE``) set the dotted key (itself or a section above it)."""
    keys = [item.partition("=")[0].strip() for item in overrides]
    return lambda dotted: any(dotted == key or dotted.startswith(key + ".") for key in keys)


def load_run_config(path: str | Path, overrides: list[str] | tuple[str, ...] = (), registry: Registry | None = None) -> RunConfig:
    """A run config file, with dotted overrides (``seed=2``) applied before validation; ``registry``
    gives the installed task families when the file names no task (see :func:`parse_run_config`).
    Paths the file names (:func:`config_path_fields`) are relative to its folder; those the overrides
    name, to the working directory (the command line's)."""
    data = rebase_paths(read_yaml(path), Path(path).parent, str(path), registry)
    if overrides:
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping at the top level")
        data = apply_overrides(data, overrides)
        return parse_run_config(data, f"{path} with {' '.join(overrides)}", registry)
    return parse_run_config(data, str(path), registry)
