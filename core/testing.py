"""Conformance checks for a task family: ``envengineer.testing``.

Any family, built in or from a third-party package, should pass these before it is used in
a run. Each check returns a list of problems (empty: it passes), each naming what failed
and how to reproduce it; :func:`assert_task_conforms` runs them all and raises one
``AssertionError`` listing every problem, so a family's own test suite needs one line::

    from envengineer.testing import assert_task_conforms

    def test_my_task_conforms():
        assert_task_conforms("my-task", {"level": 2}, plugins=["my_package"])

What is checked:

- **knob declarations**: every declared knob is a field of the config model (of the knob
  table's per-group model when the task has a table), and its ``low`` and ``high`` each
  validate when set into the default config (a knob declared wider than its field's
  constraints would make proposals and ``random_config`` fall back to the current config);
- **knobs reach the records**: each declared knob at its low bound and at its high bound (a share
  knob: the whole budget on the first group, then on the last) gives different records from the
  same seed, so a generator that ignores the config it is given fails;
- **determinism**: the same config and seed give the same records, byte for byte, twice in
  this process and in fresh interpreters under other ``PYTHONHASHSEED`` values;
- **projection**: ``project()`` never raises on fuzzed, hostile proposals (wrong types,
  NaN, huge numbers, unknown keys and groups), always returns a valid config of the task's
  config model, with every declared knob inside its bounds, integer knobs whole, budget
  shares summing to 1;
- **validator**: ``score()`` never raises on hostile answers (20,000 characters, deep
  nesting, code, huge exponents, control characters), returns a :class:`Verdict` with a
  score in [0, 1] and a declared failure type, answers each within ``time_limit`` seconds,
  and executes nothing (a code-like answer that would create a file does not);
- **reference answers**: where the family has a reference solver, its answers score valid
  and optimal (through the prompt style's decoding when the style has its own format).

The checks use only the standard library beside the project (no pytest, no hypothesis), so
they run anywhere; the fuzzing is seeded and the same every time. The time limit is a check
on the validator, never something that decides what a run produces; it counts the scoring
thread's CPU time (``time.thread_time``), not the wall clock, so another process on a busy
machine does not fail a validator that is fast enough.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from envengineer.components import Generator, Validator, Verdict


def load_task(task: str, options: Mapping[str, Any] | None = None, *, plugins: Sequence[str] = ()) -> tuple[Generator, Validator]:
    """The (generator, validator) of ``task`` from the installed plugins plus the modules in ``plugins``.

    A module in ``plugins`` with a misnamed hook (``register_generator`` for ``register_generators``,
    or a hook function not marked ``@hookimpl``) raises a ``RegistrationError`` naming the module,
    the name and the closest hook; a task no plugin registered, while an installed plugin failed
    to load, raises one naming those failures, not only "unknown generator"."""
    from envengineer.errors import RegistrationError, UnknownComponentError
    from envengineer.plugin_manager import HookNameError, create_plugin_manager
    from envengineer.registry import load_registry

    pm = create_plugin_manager()
    for name in plugins:
        module = importlib.import_module(name)
        if not pm.is_registered(module):
            try:
                pm.register(module, name=f"testing:{name}")
            except HookNameError as exc:
                raise RegistrationError(f"plugin module {name!r}: {'; '.join(exc.problems)}") from None
    registry = load_registry(pm)
    try:
        return registry.task(task, dict(options or {}))
    except UnknownComponentError as exc:
        if not pm.load_report.failed:
            raise
        failed = "; ".join(f"{who}: {error}" for who, error in pm.load_report.failed)
        raise RegistrationError(f"{exc}; plugins that failed to load: {failed}") from None


def records_digest(records: Iterable[Mapping[str, Any]]) -> str:
    """sha256 of the records as the run directory writes them (one JSON line each)."""
    digest = hashlib.sha256()
    for record in records:
        digest.update(json.dumps(record, sort_keys=False, ensure_ascii=False).encode() + b"\n")
    return digest.hexdigest()


# ------------------------------------------------------------------ determinism


def check_determinism(
    task: str, options: Mapping[str, Any] | None = None, *, plugins: Sequence[str] = (), n: int = 24, seed: int = 0,
    hash_seeds: Sequence[int] = (0, 4242), generator: Generator | None = None,
) -> list[str]:
    """Same config and seed, same bytes: twice here, and in fresh interpreters under each of ``hash_seeds``."""
    generator = generator or load_task(task, options, plugins=plugins)[0]
    config = generator.default_config()
    first = records_digest(generator.generate(config, n=n, seed=seed).records)
    problems = []
    if records_digest(generator.generate(config, n=n, seed=seed).records) != first:
        problems.append(f"determinism: generate(default config, n={n}, seed={seed}) gave other records the second time")
    if records_digest(generator.generate(config, n=n, seed=seed + 1).records) == first:
        problems.append(f"determinism: seeds {seed} and {seed + 1} gave the same records")
    code = (
        "import json, sys\n"
        "from envengineer.testing import load_task, records_digest\n"
        "task, options, plugins, n, seed = json.loads(sys.argv[1])\n"
        "g, _ = load_task(task, options, plugins=plugins)\n"
        "print(records_digest(g.generate(g.default_config(), n=n, seed=seed).records))\n"
    )
    arguments = json.dumps([task, dict(options or {}), list(plugins), n, seed])
    for hash_seed in hash_seeds:
        env = {**os.environ, "PYTHONHASHSEED": str(hash_seed), "PYTHONPATH": os.pathsep.join(filter(None, [*sys.path]))}
        done = subprocess.run([sys.executable, "-c", code, arguments], capture_output=True, text=True, env=env)
        if done.returncode != 0:
            problems.append(f"determinism: a fresh interpreter (PYTHONHASHSEED={hash_seed}) failed to generate: {done.stderr.strip()[-500:]}")
        elif done.stdout.strip() != first:
            problems.append(f"determinism: PYTHONHASHSEED={hash_seed} gave other records (sets or dicts iterated in hash order?)")
    return problems


# ------------------------------------------------------------------ knob declarations


def _table_groups(generator: Generator, config: Any) -> list[tuple[str, type | None, dict[str, Any]]]:
    """``(group, per-group model or None, the group's values)`` of the knob table in ``config``."""
    table = getattr(config, generator.knob_table, None)
    dumped = config.model_dump().get(generator.knob_table)
    if not isinstance(dumped, Mapping):
        return []
    groups = []
    for group, values in dumped.items():
        original = table.get(group) if isinstance(table, Mapping) else getattr(table, str(group), None)
        model = type(original) if hasattr(type(original), "model_fields") else None
        groups.append((str(group), model, dict(values) if isinstance(values, Mapping) else {}))
    return groups


def _validates(model: Any, data: Mapping[str, Any]) -> str | None:
    """None when ``model`` accepts ``data``; else its first error, on one line."""
    try:
        model.model_validate(dict(data))
    except Exception as exc:  # noqa: BLE001 - any refusal is reported
        errors = exc.errors() if hasattr(exc, "errors") else []
        if errors:
            where = ".".join(map(str, errors[0].get("loc", ())))
            return f"{where + ': ' if where else ''}{errors[0].get('msg')}"
        return " ".join(str(exc).split())[:200]
    return None


def check_knob_declarations(generator: Generator) -> list[str]:
    """Each declared knob is a field of the config model (the knob table's per-group model when the
    task has one) and its ``low`` and ``high`` validate when set into the default config.

    A bound that depends on the group is declared at its loosest: it passes when some group takes it.
    A share knob's bounds are checked against the per-group model alone (one share set to a bound
    alone breaks the sum to 1)."""
    problems: list[str] = []
    config = generator.default_config()
    model = generator.config_model
    table = generator.knob_table
    base = config.model_dump()
    if table is None:
        for knob in generator.knobs:
            if knob.name not in model.model_fields:
                problems.append(f"knobs: knob {knob.name!r} is no field of {model.__name__} (fields: {', '.join(model.model_fields) or 'none'})")
                continue
            for label, bound in (("low", knob.low), ("high", knob.high)):
                error = _validates(model, {**base, knob.name: _bound_value(knob, bound)})
                if error:
                    problems.append(f"knobs: knob {knob.name!r} {label} = {bound:g} does not validate in the default "
                                    f"{model.__name__} ({error}); declare bounds within the field's constraints")
        return problems
    groups = _table_groups(generator, config)
    if not groups:
        return [f"knobs: the knob table {table!r} of the default config is not a mapping of groups"]
    for knob in generator.knobs:
        present = [(g, m, v) for g, m, v in groups if (m is not None and knob.name in m.model_fields) or knob.name in v]
        if not present:
            names = sorted({m.__name__ for _, m, _ in groups if m is not None})
            fields = sorted({f for _, m, _ in groups if m is not None for f in m.model_fields} | {k for _, _, v in groups for k in v})
            owner = f"{'/'.join(names)} (the {table!r} table's per-group model)" if names else f"any group of the {table!r} table"
            problems.append(f"knobs: knob {knob.name!r} is no field of {owner} (fields: {', '.join(fields) or 'none'})")
            continue
        for label, bound in (("low", knob.low), ("high", knob.high)):
            value = _bound_value(knob, bound)
            errors = []
            for group, group_model, values in present:
                candidate = {**values, knob.name: value}
                error = _validates(group_model, candidate) if group_model is not None else None
                if error is None and not knob.share:
                    merged = {**base, table: {**base[table], group: candidate}}
                    error = _validates(model, merged)
                if error is None:
                    break
                errors.append(f"{group}: {error}")
            else:
                problems.append(f"knobs: knob {knob.name!r} {label} = {bound:g} does not validate in any group of the default "
                                f"config ({errors[0]}); declare bounds within the field's constraints")
    return problems


def check_knobs_reach_records(generator: Generator, *, n: int = 24, seed: int = 0) -> list[str]:
    """Each declared knob's value reaches the generated records: the records made at the knob's low bound and at
    its high bound (every group that has it, the rest of the default config kept, the same seed) differ. A
    generator that ignores the config it is given makes valid-looking records on which the engineer's designs
    do nothing; this is the check that catches it. A share knob is moved by putting the whole budget on the
    first group, then on the last; a knob declared with one value (low = high) is left out."""
    problems: list[str] = []
    default = generator.default_config()
    values = generator.knob_values(default)
    groups = list(values) if generator.knob_table is not None else ["all"]

    def records(proposal: Mapping[str, Any]) -> tuple[str, str | None]:
        try:
            config = generator.project(proposal, default).config
            made = generator.generate(config, n=n, seed=seed).records
        except Exception as exc:  # noqa: BLE001 - reported
            return "", f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        return records_digest(made), None

    for knob in generator.knobs:
        if knob.share:
            if generator.knob_table is None or len(groups) < 2:
                continue
            ends = []
            for target in (groups[0], groups[-1]):
                ends.append(generator.knob_proposal({g: {knob.name: knob.high if g == target else knob.low} for g in groups}))
            what = f"the whole budget on {groups[0]!r}, then on {groups[-1]!r}"
        else:
            having = [g for g in groups if generator.knob_table is None or knob.name in (values.get(g) or {})]
            if not having or knob.low == knob.high:  # a knob with one value has nothing to move
                continue
            ends = [generator.knob_proposal({g: {knob.name: _bound_value(knob, bound)} for g in having}) for bound in (knob.low, knob.high)]
            what = f"{knob.low:g} and {knob.high:g}"
        (low, low_error), (high, high_error) = records(ends[0]), records(ends[1])
        if low_error or high_error:
            problems.append(f"knobs reach the records: generating with knob {knob.name!r} at {what} failed: {low_error or high_error}")
        elif low == high:
            problems.append(f"knobs reach the records: knob {knob.name!r} at {what} gave identical records (n={n}, seed={seed}): "
                            "the generator ignores it, so no design moves what is trained")
    return problems


def _bound_value(knob: Any, bound: float) -> float | int:
    return int(bound) if knob.integer else float(bound)


# ------------------------------------------------------------------ projection

_HOSTILE_VALUES: tuple[Any, ...] = (
    None, True, -1, 0, 1, 2, 10**12, -(10**12), 1e308, -1e308, float("nan"), float("inf"), float("-inf"), 0.5, -0.5,
    "", "0.3", "abc", "1e999", "NaN", [], [1, 2], {}, {"x": 1}, "﻿", "\x00", 3.0000001, 1 / 3,
)


def fuzz_proposals(generator: Generator, current: Any, count: int = 200, seed: int = 0) -> list[Any]:
    """Seeded hostile proposals shaped like ``current``'s dump: wrong types, NaN, huge values, unknown keys and groups."""
    rng = random.Random(f"envengineer-testing-{generator.name}-{seed}")
    base = current.model_dump(mode="json") if hasattr(current, "model_dump") else dict(current)

    def mutate(value: Any, depth: int) -> Any:
        roll = rng.random()
        if roll < 0.25 or depth > 4:
            return rng.choice(_HOSTILE_VALUES)
        if isinstance(value, dict):
            out = {}
            for key, sub in value.items():
                if rng.random() < 0.15:
                    continue  # a missing key
                out[rng.choice([key, key, key, f"{key}_typo", key.upper() if isinstance(key, str) else key])] = mutate(sub, depth + 1)
            if rng.random() < 0.3:
                out[rng.choice(["unknown", "__class__", "99x99", "", "ratio"])] = rng.choice(_HOSTILE_VALUES)
            return out
        if isinstance(value, list):
            return [mutate(v, depth + 1) for v in value] + ([rng.choice(_HOSTILE_VALUES)] if rng.random() < 0.3 else [])
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return rng.choice([value * rng.uniform(-3, 3), value + rng.choice([-1, 1]) * rng.random(), rng.choice(_HOSTILE_VALUES), value])
        return rng.choice([value, rng.choice(_HOSTILE_VALUES)])

    proposals: list[Any] = [{}, None, [], "sizes: all", 42, {"": None}, base]
    while len(proposals) < count:
        proposals.append(mutate(base, 0))
    return proposals[:count]


def check_projection(generator: Generator, *, count: int = 200, seed: int = 0) -> list[str]:
    """``project()`` never raises and always lands inside the task's declared constraints."""
    problems: list[str] = []
    current = generator.default_config()
    for i, proposal in enumerate(fuzz_proposals(generator, current, count, seed)):
        where = f"projection: fuzzed proposal #{i} (fuzz_proposals(generator, default_config, {count}, {seed})[{i}])"
        try:
            projection = generator.project(proposal, current)
        except Exception as exc:  # noqa: BLE001 - the check reports any exception
            problems.append(f"{where} raised {type(exc).__name__}: {exc}")
            continue
        config = projection.config
        if not isinstance(config, generator.config_model):
            problems.append(f"{where} returned a {type(config).__name__}, not a {generator.config_model.__name__}")
            continue
        try:
            generator.config_model.model_validate(config.model_dump())
        except Exception as exc:  # noqa: BLE001
            problems.append(f"{where} returned a config its own model refuses: {' '.join(str(exc).split())[:300]}")
            continue
        problems.extend(f"{where}: {p}" for p in knob_problems(generator, config))
        if len(problems) >= 10:
            break
    return problems


def knob_problems(generator: Generator, config: Any) -> list[str]:
    """Declared knobs outside their bounds, non-whole integer knobs, shares that do not sum to 1."""
    problems = []
    values = generator.knob_values(config)
    for knob in generator.knobs:
        shares = []
        for group, knobs in values.items():
            if knob.name not in knobs:
                continue
            value = knobs[knob.name]
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                problems.append(f"{group}.{knob.name} = {value!r} is not a finite number")
                continue
            if not knob.low - 1e-9 <= value <= knob.high + 1e-9:
                problems.append(f"{group}.{knob.name} = {value} is outside [{knob.low}, {knob.high}]")
            if knob.integer and float(value) != int(value):
                problems.append(f"{group}.{knob.name} = {value} is not whole")
            shares.append(value)
        if knob.share and shares and abs(sum(shares) - 1.0) > 1e-6:
            problems.append(f"the {knob.name} shares sum to {sum(shares):.9g}, not 1")
    return problems


# ------------------------------------------------------------------ validator


def hostile_answers(marker: Path) -> list[str]:
    """Answers no validator should choke on. The code-like ones would create ``marker`` if executed."""
    code = f"__import__('pathlib').Path({str(marker)!r}).write_text('x')"
    return [
        "", " ", "\x00" * 100, "a" * 20_000, "(" * 20_000, "[" * 10_000 + "]" * 10_000, "{" * 5_000,
        "9**9**9**9", "9" * 20_000, "1e999999", "-" * 20_000, "\n" * 20_000, "→←↑↓" * 2_000, "\u202e" * 1_000,
        code, f"<answer>{code}</answer>", f"```python\n{code}\n```", f"eval({code!r})", f"{{'a': {code}}}",
        "<answer>" * 5_000, "</answer>" * 5_000, "```yaml\n" + "- " * 5_000 + "\n```", "&a [" * 3_000,
        json.dumps([[[[[[[[[[[]]]]]]]]]]] * 500), "null", "None", "NaN", "inf", "0" * 20_000,
    ]


def check_validator(
    generator: Generator, validator: Validator, records: Sequence[Mapping[str, Any]], *, time_limit: float = 1.0,
) -> list[str]:
    """``score()`` on hostile answers: no exception, a bounded verdict, within ``time_limit`` seconds, no side effect."""
    problems: list[str] = []
    failure_types = set(validator.failure_types)
    with tempfile.TemporaryDirectory() as folder:
        marker = Path(folder) / "executed"
        for record in records[:3]:
            for index, answer in enumerate(hostile_answers(marker)):
                where = f"validator: hostile_answers(...)[{index}] ({answer[:30]!r}…, {len(answer)} characters) on {generator.record_id(record)}"
                started = time.thread_time()  # CPU seconds of this thread: a busy machine does not count
                try:
                    verdict = validator.score(record, answer)
                except Exception as exc:  # noqa: BLE001
                    problems.append(f"{where} raised {type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
                    continue
                seconds = time.thread_time() - started
                if seconds > time_limit:
                    problems.append(f"{where} took {seconds:.2f} CPU s (limit {time_limit} s)")
                problems.extend(f"{where}: {p}" for p in verdict_problems(verdict, failure_types))
                if marker.exists():
                    problems.append(f"{where} executed the answer (it created a file)")
                    marker.unlink()
            if len(problems) >= 10:
                break
    return problems


def verdict_problems(verdict: Any, failure_types: set[str]) -> list[str]:
    if not isinstance(verdict, Verdict):
        return [f"returned a {type(verdict).__name__}, not a Verdict"]
    problems = []
    if not isinstance(verdict.score, (int, float)) or not 0.0 <= verdict.score <= 1.0:
        problems.append(f"score {verdict.score!r} is outside [0, 1]")
    if verdict.optimal and not verdict.valid:
        problems.append("optimal but not valid")
    if not verdict.valid and failure_types and verdict.failure not in failure_types:
        problems.append(f"failure {verdict.failure!r} is not one of the declared failure types")
    return problems


def check_reference_answers(generator: Generator, validator: Validator, records: Sequence[Mapping[str, Any]]) -> list[str]:
    """Reference answers score valid and optimal, in every prompt style's own answer format."""
    problems = []
    for record in records:
        try:
            answer = generator.reference_answer(record)
        except NotImplementedError:
            return []  # no reference solver: nothing to check
        except Exception as exc:  # noqa: BLE001
            problems.append(f"reference: reference_answer({generator.record_id(record)}) raised {type(exc).__name__}: {exc}")
            continue
        verdict = validator.score(record, generator.decode_response(record, answer, "full"))
        if not (verdict.valid and verdict.optimal):
            problems.append(f"reference: the reference answer to {generator.record_id(record)} scores valid={verdict.valid} optimal={verdict.optimal} ({verdict.failure})")
        if len(problems) >= 10:
            break
    return problems


# ------------------------------------------------------------------ all together


def check_task(
    task: str, options: Mapping[str, Any] | None = None, *, plugins: Sequence[str] = (), n: int = 24, seed: int = 0,
    fuzz: int = 200, time_limit: float = 1.0, hash_seeds: Sequence[int] = (0, 4242),
) -> list[str]:
    """Every check on ``task`` (with ``options``; ``plugins``: extra modules to register); the problems found."""
    generator, validator = load_task(task, options, plugins=plugins)
    records = generator.generate(generator.default_config(), n=n, seed=seed).records
    if not records:
        return [f"generate: the default config gave no records for n={n}, seed={seed}"]
    problems = []
    for record in records:
        try:
            generator.check_record(record)
        except ValueError as exc:
            problems.append(f"generate: check_record refuses a generated record {generator.record_id(record)}: {exc}")
            break
    problems += check_knob_declarations(generator)
    problems += check_knobs_reach_records(generator, n=n, seed=seed)
    problems += check_determinism(task, options, plugins=plugins, n=n, seed=seed, hash_seeds=hash_seeds, generator=generator)
    problems += check_projection(generator, count=fuzz, seed=seed)
    problems += check_validator(generator, validator, records, time_limit=time_limit)
    problems += check_reference_answers(generator, validator, records)
    return problems


def assert_task_conforms(task: str, options: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
    """:func:`check_task`, raising one ``AssertionError`` that lists every problem."""
    problems = check_task(task, options, **kwargs)
    if problems:
        raise AssertionError(f"task {task!r} does not conform ({len(problems)} problems):\n- " + "\n- ".join(problems))
