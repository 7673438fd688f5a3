"""Generate, solve and score over files: the Python API behind the CLI commands."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from envengineer.components import Generator, Validator
from envengineer.errors import InputError
from envengineer.fileio import atomic_open, dumps_json, iter_jsonl, read_jsonl
from envengineer.components.metrics import Summary


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
    from envengineer.loop.evaluation import summarize_records

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
