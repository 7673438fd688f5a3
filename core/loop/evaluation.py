"""Evaluate a policy on a set of instances: sample, decode, score, aggregate.

Rates are reported overall and per group of every grouping the task declares
(``Generator.groupings``) and per subset of the benchmark (``Benchmark.subsets``), with
failure counts, the mean graded score, and the benchmark's declared aggregate over its
subsets (e.g. MAPF's "Sum"; none when it declares none). A policy behind an API reports the calls
that gave no answer (scored as empty responses); the summary records how many and the first
error, so a refused request is never mistaken for a weak model.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envengineer.components import Aggregate, Benchmark, Grouping, Verdict
from envengineer.fileio import atomic_open, dumps_json, write_json
from envengineer.components.metrics import Summary, summarize

#: Failing examples kept for the F context module (truncated, never instructions).
EXAMPLE_CHARS = 600


@dataclass
class EvalResult:
    summary: Summary
    verdicts: list[Verdict]
    responses: list[str]
    records: list[dict[str, Any]]
    settings: dict[str, Any]
    failed_calls: list[str] = field(default_factory=list)  # errors of calls that gave no answer, oldest first
    report_calls: bool = False  # record the calls section even when none failed (API policies)
    subsets: Grouping | None = None  # the benchmark's subsets, when it declares them
    aggregate: Aggregate | None = None  # the benchmark's headline number over its subsets
    sampled: dict[str, Any] | None = None  # sampled pass@1 beside the greedy rates (:func:`sampled_pass1`)

    @property
    def calls(self) -> dict[str, Any]:
        """Responses requested, calls that gave none, and the first such error."""
        return {
            "responses": len(self.responses),
            "failed": len(self.failed_calls),
            "first_error": self.failed_calls[0] if self.failed_calls else None,
        }

    @property
    def all_failed(self) -> bool:
        return bool(self.responses) and len(self.failed_calls) >= len(self.responses)

    def aggregate_values(self) -> dict[str, float] | None:
        """The benchmark's declared aggregate over its subsets; None without one (or without subsets)."""
        if self.aggregate is None or self.subsets is None:
            return None
        rates = self.summary.by.get(self.subsets.name)
        return self.aggregate.compute(rates) if rates else None

    def to_summary_dict(self) -> dict[str, Any]:
        data = self.summary.to_dict()
        values = self.aggregate_values()
        if values is not None:
            data[self.aggregate.key] = values  # type: ignore[union-attr]
        if self.sampled is not None:
            data["sampled"] = self.sampled
        data["settings"] = self.settings
        if self.report_calls or self.failed_calls:
            data["calls"] = self.calls
        return data


def spread(records: Sequence[Any], limit: int | None) -> list[Any]:
    """At most ``limit`` records, evenly spaced over the set (every group and subset stays
    represented, unlike the first ``limit`` lines of a file sorted by subset)."""
    items = list(records)
    if limit is None or limit >= len(items):
        return items
    step = len(items) / limit
    return [items[int(i * step)] for i in range(limit)]


def dimensions(generator: Any, benchmark: Benchmark | None = None) -> list[Grouping]:
    """Every grouping results are filed under, in file order: the task's primary grouping,
    the benchmark's subsets, then the task's other groupings."""
    declared = list(generator.evaluation_groupings())
    subsets = [benchmark.subsets] if benchmark is not None and benchmark.subsets is not None else []
    return [*declared[:1], *(g for g in subsets if g.name not in {d.name for d in declared}), *declared[1:]]


def display_dimensions(generator: Any, benchmark: Benchmark | None = None) -> list[Grouping]:
    """The groupings a printout shows, in order: the benchmark's subsets first, then the task's."""
    dims = dimensions(generator, benchmark)
    return [g for g in dims if benchmark is not None and g is benchmark.subsets] + [
        g for g in dims if benchmark is None or g is not benchmark.subsets
    ]


def groups_of(generator: Any, record: Mapping[str, Any], dims: Sequence[Grouping] | None = None) -> dict[str, str]:
    """The record's group in each grouping (the primary through ``generator.group``); a record
    without a grouping's field is in none of its groups."""
    dims = dimensions(generator) if dims is None else dims
    primary = generator.evaluation_groupings()[0].name
    groups: dict[str, str] = {}
    for grouping in dims:
        value = generator.group(record) if grouping.name == primary else grouping.value(record)
        if value is not None:
            groups[grouping.name] = value
    return groups


def summarize_records(
    generator: Any, verdicts: Sequence[Verdict], records: Sequence[Mapping[str, Any]], benchmark: Benchmark | None = None
) -> Summary:
    """Verdicts filed overall and under every grouping of :func:`dimensions` (in that order)."""
    dims = dimensions(generator, benchmark)
    primary = generator.evaluation_groupings()[0].name
    orders = {g.name: (tuple(generator.groups()) if g.name == primary else g.order) for g in dims}
    summary = summarize(verdicts, [groups_of(generator, r, dims) for r in records], orders={k: v for k, v in orders.items() if v})
    ranked = {g.name: i for i, g in enumerate(dims)}
    summary.by = defaultdict(dict, sorted(summary.by.items(), key=lambda item: ranked.get(item[0], len(ranked))))
    return summary


def score_response(validator: Any, generator: Any, record: Mapping[str, Any], response: str, style: str) -> Any:
    """``validator.score`` on the decoded ``response``; a validator that raises becomes a
    :class:`ValidatorError` naming the task, the record, the response and how to reproduce it."""
    try:
        return validator.score(record, generator.decode_response(record, response, style))
    except Exception as exc:
        from envengineer.errors import ValidatorError

        task = getattr(validator, "name", type(validator).__name__)
        record_id = record.get("id", "?") if isinstance(record, Mapping) else "?"
        shown = response if len(response) <= 80 else response[:80] + "…"
        raise ValidatorError(
            f"task {task!r}: the validator raised {type(exc).__name__}: {exc} scoring record {record_id!r} "
            f"on the response {shown!r}; reproduce it with `envengineer score {task} --instances I.jsonl "
            f"--responses R.jsonl` (I.jsonl: that record; R.jsonl: its id and the response)"
        ) from exc


def evaluate(
    policy: Any,
    generator: Any,
    validator: Any,
    records: Sequence[Mapping[str, Any]],
    *,
    style: str | None = None,
    batch_size: int = 64,
    progress: Callable[[int], None] | None = None,
    benchmark: Benchmark | None = None,
) -> EvalResult:
    """Sample one response per record from ``policy`` and score it; ``benchmark`` (the set the
    records come from) adds its subsets and aggregate to the summary.

    ``batch_size`` prompts go to one ``sample`` call, unless the policy sets
    ``sample_batch_size`` (the ``vllm`` policy: every prompt in one call, one engine start).
    """
    style = style or policy.prompt_style
    batch_size = policy.sample_batch_size or batch_size
    failed_before = len(policy.failed_calls())
    responses: list[str] = []
    for start in range(0, len(records), batch_size):
        batch = records[start : start + batch_size]
        outputs = policy.sample_records(generator, batch, style=style, n=1)
        responses.extend(out[0] if out else "" for out in outputs)
        if progress:
            progress(len(batch))
    verdicts = [score_response(validator, generator, record, response, style) for record, response in zip(records, responses)]
    summary = summarize_records(generator, verdicts, records, benchmark)
    settings = {"policy": policy.name, "prompt_style": style, **_sampling(policy)}
    failed = list(policy.failed_calls())[failed_before:]
    return EvalResult(
        summary, verdicts, responses, list(records), settings, failed_calls=failed, report_calls=not policy.has_weights,
        subsets=benchmark.subsets if benchmark is not None else None,
        aggregate=benchmark.aggregate if benchmark is not None else None,
    )


def sampled_pass1(policy: Any, generator: Any, validator: Any, records: Sequence[Mapping[str, Any]], *, n: int,
                  temperature: float, style: str, batch_size: int = 64, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Sampled pass@1: the share of valid answers among ``n`` sampled per record (``policy`` samples at
    ``temperature``), overall and per group of the task's primary grouping."""
    batch_size = policy.sample_batch_size or batch_size
    primary = generator.evaluation_groupings()[0].name
    valid = total = 0
    by: dict[str, list[int]] = {}
    for start in range(0, len(records), batch_size):
        batch = records[start : start + batch_size]
        for record, answers in zip(batch, policy.sample_records(generator, batch, style=style, n=n)):
            ok = sum(score_response(validator, generator, record, a, style).valid for a in answers)
            cell = by.setdefault(generator.group(record), [0, 0])
            cell[0] += ok
            cell[1] += len(answers)
            valid += ok
            total += len(answers)
        if progress:
            progress(len(batch))
    order = {g: i for i, g in enumerate(generator.groups())}
    groups = sorted(by, key=lambda g: (order.get(g, len(order)), g))
    return {
        "n": n, "temperature": temperature, "samples": total, "pass1": round(valid / total, 6) if total else None,
        "by": {primary: {g: round(by[g][0] / by[g][1], 6) for g in groups if by[g][1]}},
    }


def _sampling(policy: Any) -> dict[str, Any]:
    keep = ("path", "model", "temperature", "top_p", "max_new_tokens", "max_tokens", "seed")
    dumped = policy.options.model_dump()
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in dumped.items() if k in keep}


def failing_examples(result: EvalResult, generator: Any, *, limit: int = 8) -> list[dict[str, Any]]:
    """A few failing examples, spread over failure types, for the F module; each shows the
    instance as ``generator.example_prompt`` renders it (its shortest declared prompt style)."""
    picked: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for record, verdict, response in zip(result.records, result.verdicts, result.responses):
        if verdict.valid or len(picked) >= limit:
            continue
        if seen.get(verdict.failure or "", 0) >= max(1, limit // 4):
            continue
        seen[verdict.failure or ""] = seen.get(verdict.failure or "", 0) + 1
        prompt = generator.example_prompt(record)
        picked.append({
            "id": generator.record_id(record),
            "group": generator.group(record),
            "failure": verdict.failure,
            "prompt": str(prompt)[:EXAMPLE_CHARS],
            "response": response[:EXAMPLE_CHARS],
        })
    return picked


def write_eval(out_dir: str | Path, result: EvalResult, examples: list[dict[str, Any]] | None = None) -> None:
    """summary.json, verdicts.jsonl, responses.jsonl, examples.jsonl and a CSV of rates."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_open(out / "verdicts.jsonl") as handle:
        for record, verdict in zip(result.records, result.verdicts):
            handle.write(dumps_json(verdict.to_record(record.get("id", ""))) + "\n")
    with atomic_open(out / "responses.jsonl") as handle:
        for record, response in zip(result.records, result.responses):
            handle.write(dumps_json({"id": record.get("id", ""), "response": response}) + "\n")
    if examples is not None:
        with atomic_open(out / "examples.jsonl") as handle:
            for example in examples:
                handle.write(dumps_json(example) + "\n")
    with atomic_open(out / "rates.csv") as handle:
        handle.write("dimension,group,n,valid_rate,optimal_rate,valid_se,mean_score\n")
        rows = [("overall", "all", result.summary.overall)]
        rows += [(dim, key, rates) for dim, values in result.summary.by.items() for key, rates in values.items()]
        for dim, key, rates in rows:
            d = rates.to_dict()
            handle.write(f"{dim},{key},{d['n']},{d['valid_rate']},{d['optimal_rate']},{d['valid_se']},{d['mean_score']}\n")
    write_json(out / "summary.json", result.to_summary_dict())


# ----------------------------------------------------------------- the base evaluation's cache


#: Files of a package that :func:`code_fingerprint` leaves out: bytecode, and data past this size (weights, frozen sets).
FINGERPRINT_MAX_BYTES = 1 << 20


def package_roots(obj: Any) -> list[Path]:
    """The folders of the packages ``obj`` (a module, or an object of a class) comes from: its top-level package
    and, when the module lies deeper, its second-level package (``envengineer.tasks``, ``envengineer.plugins``:
    an installed package may map those to folders of their own)."""
    import importlib.util
    import inspect

    module = obj.__name__ if inspect.ismodule(obj) else type(obj).__module__
    parts = module.split(".")
    roots: list[Path] = []
    for depth, name in enumerate(dict.fromkeys((".".join(parts[:1]), ".".join(parts[:2])))):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            continue
        if spec.submodule_search_locations:
            roots.extend(Path(location) for location in spec.submodule_search_locations)
        elif depth == 0 and spec.origin and spec.origin not in ("built-in", "frozen"):
            roots.append(Path(spec.origin))  # a module of its own, outside any package
    return sorted(set(roots))


def code_fingerprint(objects: Sequence[Any]) -> str:
    """sha256 over every file (but bytecode and data over :data:`FINGERPRINT_MAX_BYTES`) of the packages
    ``objects`` come from (:func:`package_roots`), by path relative to its root: any edit to code that can
    change an answer or a verdict changes it, wherever in those packages the code lives."""
    import hashlib

    digest = hashlib.sha256()
    roots = sorted({root for obj in objects for root in package_roots(obj)})
    for root in roots:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in files:
            if "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
                continue
            try:
                if path.stat().st_size > FINGERPRINT_MAX_BYTES:
                    continue
                data = path.read_bytes()
            except OSError:
                continue
            digest.update(f"{root.name}/{path.relative_to(root) if root.is_dir() else path.name}\0".encode())
            digest.update(hashlib.sha256(data).digest())
    return digest.hexdigest()


def reuse_key(run: Any, policy: Any) -> dict[str, Any] | None:
    """What decides a base evaluation's answers and verdicts on any set (``run``: the resolved run), when the policy
    says its answers are a pure function of its weights and options (``evaluation_key``); None: never reuse."""
    import sys

    from envengineer import __version__

    policy_key = policy.evaluation_key()
    if policy_key is None:
        return None
    # the code that decides answers and verdicts: every file of the packages the validator, generator,
    # policy and evaluation come from (an edited prompt module, sampler or metrics module is a new evaluation)
    code = code_fingerprint((run.validator, run.generator, policy, sys.modules[__name__]))
    cfg = run.config
    sampled = (cfg.eval.sampled, run.trainer.sampling_temperature, cfg.seed) if cfg.eval.sampled else None
    return {"version": __version__, "code": code, "policy": policy_key, "style": run.policy.prompt_style, "sampled": sampled,
            "task": run.generator.options.model_dump(mode="json")}


def evaluation_cache_key(reuse: Mapping[str, Any], name: str, examples: int | None, records: Sequence[Mapping[str, Any]]) -> str:
    """The cache key of one base evaluation: ``reuse`` (:func:`reuse_key`), the set's name and records, the examples kept."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps({
        **reuse, "benchmark": name, "examples": examples,
        "records": hashlib.sha256("\n".join(dumps_json(r) for r in records).encode()).hexdigest(),
    }, sort_keys=True).encode()).hexdigest()[:24]


def cached_evaluation(run_dir: Any, out: Path, key: str) -> Path | None:
    """Copy the evaluation cached under ``key`` into ``out`` (built whole in the run directory ``run_dir``, a
    :class:`~envengineer.store.rundir.RunDir`); the cache folder it came from, or None when nothing is cached."""
    import shutil

    from envengineer.fileio import cache_root

    cached = cache_root() / "evals" / key
    if not (cached / "summary.json").is_file():
        return None
    with run_dir.building(out) as partial:
        for item in cached.iterdir():
            shutil.copy2(item, partial / item.name)
    return cached


def cache_evaluation(out: Path, key: str) -> None:
    """Keep the evaluation written in ``out`` under ``key`` for the next run with the same base."""
    import os
    import shutil

    from envengineer.fileio import cache_root

    cached = cache_root() / "evals" / key
    tmp = cached.with_name(f"{key}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        shutil.copytree(out, tmp)
        os.replace(tmp, cached)
    except OSError:  # another run filled it first, or the cache is not writable: the result stands
        shutil.rmtree(tmp, ignore_errors=True)

