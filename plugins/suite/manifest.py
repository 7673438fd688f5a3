"""A suite's configs: the run config files of a folder, and the arms of a manifest (``suite.yaml``:
one base config plus each arm's dotted overrides, applied and checked exactly as ``envengineer
run BASE KEY=VALUE ...`` does), read into :class:`~envengineer.plugins.suite.model.SuiteEntry` rows."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envengineer.errors import EnvEngineerError
from envengineer.plugins.suite.model import DEFAULT_TABLE, SuiteEntry

#: The manifest a folder of arms holds (a folder without it: every *.yaml is a run config).
MANIFEST = "suite.yaml"
#: The arm paired tests compare against when the manifest names none and an arm has this name.
DEFAULT_BASELINE = "fixed"


class Manifest(BaseModel):
    """A suite manifest (``suite.yaml``): one base run config and its arms, each the base with
    dotted overrides as ``envengineer run BASE KEY=VALUE ...`` takes them."""

    model_config = ConfigDict(extra="forbid")

    base: str = Field(min_length=1, description="the base run config, relative to the manifest")
    table: str | None = Field(None, min_length=1, description="the table the arms are rows of (default: the base's suite.table, else 'runs')")
    baseline: str | None = Field(None, min_length=1, description="the arm the paired tests compare the others against (default: the arm named fixed)")
    launcher: dict[str, Any] | None = Field(None, description="how `envengineer suite` runs the arms on a cluster (docs/cluster.md): name, resources, Slurm and Ray settings")
    common: Any = Field(
        None, description="overrides every arm gets before its own ({dotted.key: value} or [KEY=VALUE, ...]), e.g. a shorter budget for the whole suite")
    arms: dict[str, Any] = Field(min_length=1, description="arm name -> {dotted.key: value} or [KEY=VALUE, ...] (null: the base as it is)")
    seeds: list[int] | dict[int, Any] | None = Field(
        None, description="the seeds every arm runs when --seeds is not given: a list ([4, 5, 6, 7]), or seed -> overrides that run "
        "gets after its arm's ({4: {policy.seed: 0}, 6: {policy.seed: 1}}: e.g. a warm start per seed); default: --seeds 3")


#: Fields the suite sets on every run: an arm that sets them would be silently overridden.
SUITE_SET = ("seed", "output")
ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def is_manifest(path: Path) -> bool:
    """A file named ``suite.yaml``, or a YAML file whose top level has ``arms`` (a run config never has it)."""
    from envengineer.fileio import read_yaml

    if path.name == MANIFEST:
        return True
    data = read_yaml(path)
    return isinstance(data, dict) and "arms" in data


def yaml_value(value: Any) -> str:
    """``value`` as the right-hand side of a command-line override (``engineer={name: fixed}``)."""
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**9, allow_unicode=True)
    text = text[: -len("\n...\n")] if text.endswith("\n...\n") else text.rstrip("\n")
    return text


def arm_overrides(manifest: Path, arm: str | None, spec: Any, where: str | None = None) -> tuple[str, ...]:
    """An arm's overrides (``arm`` None: the manifest's ``common`` ones) as ``KEY=VALUE`` strings; errors name
    the manifest and the arm's field (``where``: another field's name, e.g. ``seeds.4``)."""
    where = f"{manifest}: {where}" if where else (f"{manifest}: arms.{arm}" if arm is not None else f"{manifest}: common")
    if spec is None:
        return ()
    if isinstance(spec, dict):
        items = []
        for key, value in spec.items():
            if not isinstance(key, str) or not key.strip():
                raise EnvEngineerError(f"{where}: {key!r}: a key is a dotted field name, e.g. engineer.name")
            items.append((key.strip(), f"{key.strip()}={yaml_value(value)}"))
    elif isinstance(spec, list):
        items = []
        for item in spec:
            key, sep, _ = str(item).partition("=")
            if not isinstance(item, str) or not sep or not key.strip():
                raise EnvEngineerError(f"{where}: {item!r}: expected KEY=VALUE, e.g. engineer.name=fixed")
            items.append((key.strip(), item))
    else:
        raise EnvEngineerError(
            f"{where}: expected a mapping of dotted fields to values ({{engineer.name: fixed}}) or a list of "
            f"KEY=VALUE overrides, not {type(spec).__name__}"
        )
    for key, _ in items:
        if key.split(".")[0] in SUITE_SET:
            raise EnvEngineerError(f"{where}.{key}: set by the suite for every run (--seeds, --output); leave it out")
    return tuple(item for _, item in items)


def read_manifest(path: Path, registry: Any = None) -> list[SuiteEntry]:
    """A manifest's arms, each its base with its overrides applied and checked as `envengineer run`
    checks them (every plugin section included); errors name the manifest, the arm and the field."""
    import copy

    from envengineer.errors import ConfigError
    from envengineer.fileio import read_yaml
    from envengineer.registry import format_validation_error
    from envengineer.loop.runconfig import apply_overrides, override_keys, parse_run_config, rebase_paths, resolve

    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path}:\n{format_validation_error(exc)}") from None
    for arm in manifest.arms:
        if not ARM_NAME.fullmatch(str(arm)):
            raise ConfigError(f"{path}: arms.{arm}: an arm's name names its run folder: letters, digits, . _ - (not starting with . _ -)")
    if manifest.baseline is not None and manifest.baseline not in manifest.arms:
        raise ConfigError(f"{path}: baseline: no arm named {manifest.baseline} (arms: {', '.join(manifest.arms)})")
    if manifest.launcher is not None:
        from envengineer.plugins.suite.launch.base import launcher_options

        launcher_options(manifest.launcher, where=str(path))  # checked here: the error names the manifest
    baseline = manifest.baseline or (DEFAULT_BASELINE if DEFAULT_BASELINE in manifest.arms else None)
    base_path = Path(manifest.base) if Path(manifest.base).is_absolute() else path.parent / manifest.base
    if not base_path.is_file():
        raise ConfigError(f"{path}: base: {base_path}: no such run config file")
    base = read_yaml(base_path)
    if not isinstance(base, dict):
        raise ConfigError(f"{base_path}: expected a mapping at the top level")
    if registry is None:
        from envengineer.registry import load_registry

        registry = load_registry()
    base = rebase_paths(base, base_path.parent, str(base_path), registry)  # the base's paths: from the base's folder
    if "arms" in base:
        raise ConfigError(f"{path}: base: {base_path} is a manifest, not a run config")
    base_suite = base.get("suite") if isinstance(base.get("suite"), dict) else {}
    table = manifest.table or base_suite.get("table") or DEFAULT_TABLE
    common = arm_overrides(path, None, manifest.common)
    seeds = manifest.seeds
    if isinstance(seeds, list) and len(set(seeds)) != len(seeds):
        raise ConfigError(f"{path}: seeds: a seed is listed twice ({seeds})")
    if seeds is not None and (not seeds or min(seeds) < 0):
        raise ConfigError(f"{path}: seeds: give one seed or more, each 0 or above (got {list(seeds)})")
    per_seed = ({seed: arm_overrides(path, None, spec, where=f"seeds.{seed}") for seed, spec in seeds.items()}
                if isinstance(seeds, dict) else {})
    entries = []
    for order, (arm, spec) in enumerate(manifest.arms.items()):
        overrides = common + arm_overrides(path, arm, spec)
        arm_data = copy.deepcopy(base)
        arm_data["name"] = f"{base['name']}-{arm}" if isinstance(base.get("name"), str) else arm
        arm_data["suite"] = {**base_suite, "table": table, "row": arm, "order": order}

        def parsed(overrides: tuple[str, ...], seed: int | None = None) -> Any:
            where = (f"{path}: arm {arm}" + (f" at seed {seed}" if seed is not None else "") + f" ({base_path}"
                     + (f" with {' '.join(overrides)})" if overrides else ")"))
            try:
                data = apply_overrides(copy.deepcopy(arm_data), overrides)
                # the paths the manifest's overrides name: from the manifest's folder
                data = rebase_paths(data, path.parent, f"{path}: arm {arm}", registry, only=override_keys(overrides))
                config = parse_run_config(data, where, registry)
                resolve(config, registry)  # every plugin section, as `envengineer run` checks it before writing anything
            except EnvEngineerError as exc:
                message = str(exc) if str(exc).startswith(where) else f"{where}: {exc}"
                try:
                    error = type(exc)(message)
                except Exception:  # noqa: BLE001 - an error type with another signature: say it as a config error
                    error = ConfigError(message)
                raise error from None
            return config

        config = parsed(overrides)
        seed_configs = {seed: parsed(overrides + extra, seed) for seed, extra in per_seed.items() if extra}
        entries.append(SuiteEntry(path, config, arm=arm, base=base_path, overrides=overrides, baseline=arm == baseline,
                                  launcher=manifest.launcher, seeds=tuple(seeds) if seeds is not None else None,
                                  seed_configs=seed_configs, seed_overrides=per_seed))
    return entries


def config_files(sources: Sequence[str | Path]) -> list[Path]:
    """The YAML files named, or found directly in the folders named (sorted); a folder that holds a
    manifest (``suite.yaml``) gives the manifest alone. Errors name the path."""
    if not sources:
        raise EnvEngineerError("suite: give at least one folder of run configs, manifest or config file")
    files: list[Path] = []
    for source in map(Path, sources):
        if source.is_dir():
            if (source / MANIFEST).is_file():
                files.append(source / MANIFEST)
                continue
            found = sorted(p for p in source.iterdir() if p.is_file() and p.suffix.lower() in (".yaml", ".yml"))
            if not found:
                raise EnvEngineerError(f"{source}: no run configs (*.yaml) in this folder")
            files.extend(found)
        elif source.is_file():
            files.append(source)
        else:
            raise EnvEngineerError(f"{source}: no such folder or run config file")
    return list({path.resolve(): path for path in files}.values())


def read_entries(sources: Sequence[str | Path], registry: Any = None) -> list[SuiteEntry]:
    """Every config file and manifest arm of ``sources``, checked; two that would share a run folder are refused."""
    from envengineer.loop.runconfig import load_run_config

    entries: list[SuiteEntry] = []
    for path in config_files(sources):
        if is_manifest(path):
            entries.extend(read_manifest(path, registry))
        else:
            entries.append(SuiteEntry(path, load_run_config(path, registry=registry)))
    stems: dict[str, SuiteEntry] = {}
    for entry in entries:
        other = stems.get(entry.stem)
        if other is not None:
            what = lambda e: f"arm {e.arm} of {e.path}" if e.arm else str(e.path)  # noqa: E731
            raise EnvEngineerError(f"{what(entry)}: same name as {what(other)}; their runs would share {entry.stem}/ in the suite folder")
        stems[entry.stem] = entry
    return entries
