"""Generate, solve and score over files: the Python API behind the CLI commands."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from envengineer.components import Generator, Validator
from envengineer.errors import ConfigError, InputError
from envengineer.fileio import atomic_open, dumps_json, iter_jsonl, read_jsonl, read_yaml
from envengineer.metrics import Summary
from envengineer.registry import format_validation_error


def load_generator_config(generator: Generator, path: str | Path | None, *, check_bounds: bool = True) -> BaseModel:
    """The generator config in ``path`` (strictly validated), or the generator's default.

    A declared knob outside its bounds is refused too: the design step's projection keeps every
    knob within them (a share from round 1 on), so round 0 would train on a config no later
    round can have. ``check_bounds=False``: a config the loop recorded itself (a run started before
    the check, resumed) is read as it was written."""
    if path is None:
        return generator.default_config()
    data = read_yaml(path)
    try:
        config = generator.config_model.model_validate(data if data is not None else {})
    except ValidationError as exc:
        raise ConfigError(f"{path}:\n{format_validation_error(exc)}") from None
    problems = knobs_out_of_bounds(generator, config) if check_bounds else []
    if problems:
        raise ConfigError(f"{path}:\n" + "\n".join(problems))
    return config


def knobs_out_of_bounds(generator: Generator, config: BaseModel) -> list[str]:
    """One line per declared knob value outside the bounds the default projection keeps it in,
    naming the field (a share's bounds as :func:`envengineer.knobs.renormalize` narrows them)."""
    from envengineer.knobs import number, share_bounds

    table = generator.knob_table
    if table is None:
        dumped = config.model_dump()
        rows = {None: {k.name: dumped[k.name] for k in generator.knobs if k.name in dumped}}
    else:
        rows = dict(generator.knob_values(config))
    share = generator.share_knob()
    shared = sum(1 for values in rows.values() if share is not None and share.name in values)
    problems = []
    for group, values in rows.items():
        for knob in generator.knobs:
            raw = values.get(knob.name)
            value = number(raw)
            if value is None:
                continue
            low, high = share_bounds(knob, shared) if knob.share and table is not None and shared else (knob.low, knob.high)
            where = knob.name if group is None else f"{table}.{group}.{knob.name}"
            clips = f"the design step's projection clips it into [{low:g}, {high:g}] when it moves it"
            if value < low - 1e-9:
                why = "the design step raises it to the floor from round 1 on" if knob.share else clips
                problems.append(f"{where}: {raw} is below the projection's floor {low:g}; {why}, so give it at least {low:g}")
            elif value > high + 1e-9:
                why = "the design step lowers it to the ceiling from round 1 on" if knob.share else clips
                problems.append(f"{where}: {raw} is above the projection's ceiling {high:g}; {why}, so give it at most {high:g}")
    return problems


def generate_file(
    generator: Generator,
    config: BaseModel,
    *,
    n: int,
    seed: int,
    output: str | Path,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, int]:
    """Write ``n`` records to ``output`` atomically; return the discard counts."""
    result = generator.generate(config, n=n, seed=seed, workers=workers, progress=progress)
    with atomic_open(output) as handle:
        for record in result.records:
            handle.write(dumps_json(record) + "\n")
    return result.discarded


def load_instances(
    path: str | Path,
    validate: Callable[[Mapping[str, Any]], Any] | None = None,
    record_id: Callable[[Mapping[str, Any]], str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Instances by id (``record_id``, default the ``id`` field); a malformed record or duplicate
    id names the file and line."""
    instances: dict[str, dict[str, Any]] = {}
    for line, record in enumerate(read_jsonl(path), start=1):
        if record_id is None:
            rid = record.get("id")
        else:
            try:
                rid = record_id(record)
            except (KeyError, TypeError, ValueError):
                rid = None
        if not isinstance(rid, str) or not rid:
            raise InputError(f"{path}, record {line}: missing string field 'id'")
        if rid in instances:
            raise InputError(f"{path}, record {line}: duplicate id {rid!r}")
        if validate is not None:
            try:
                validate(record)
            except ValueError as exc:
                raise InputError(f"{path}, record {line} ({rid}): {exc}") from None
        instances[rid] = record
    return instances


def solve_file(generator: Generator, *, instances: str | Path, output: str | Path, progress: Callable[[int], None] | None = None) -> int:
    return solve_records(generator, read_jsonl(instances), source=instances, output=output, progress=progress)


def solve_records(
    generator: Generator,
    records: list[dict[str, Any]],
    *,
    source: str | Path,
    output: str | Path,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Write the reference answers of ``records`` (read from ``source``) to ``output`` atomically."""
    with atomic_open(output) as handle:
        for line, record in enumerate(records, start=1):
            try:
                response = generator.reference_answer(record)
                rid = generator.record_id(record)
            except (ValueError, KeyError, TypeError) as exc:
                raise InputError(f"{source}, record {line}: {exc}") from None
            handle.write(dumps_json({"id": rid, "response": response}) + "\n")
            if progress:
                progress(1)
    return len(records)


def score_file(
    generator: Generator,
    validator: Validator,
    *,
    instances: str | Path,
    responses: str | Path,
    output: str | Path,
    progress: Callable[[int], None] | None = None,
) -> Summary:
    """One verdict per response line, in order; returns the summary (overall, and per group of
    every grouping the task declares)."""
    from envengineer.evaluation import summarize_records

    by_id = load_instances(instances, generator.check_record, generator.record_id)
    verdicts = []
    scored = []
    with atomic_open(output) as handle:
        for line, response in enumerate(iter_jsonl(responses), start=1):
            rid = response.get("id")
            if rid not in by_id:
                raise InputError(f"{responses}, line {line}: unknown instance id {rid!r} (not in {instances})")
            text = response.get("response")
            if not isinstance(text, str):
                raise InputError(f"{responses}, line {line}: field 'response' must be a string")
            record = by_id[rid]
            verdict = validator.score(record, text)
            handle.write(dumps_json(verdict.to_record(rid)) + "\n")
            verdicts.append(verdict)
            scored.append(record)
            if progress:
                progress(1)
    return summarize_records(generator, verdicts, scored)
