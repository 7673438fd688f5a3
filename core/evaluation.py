"""Evaluate a policy on a set of instances: sample, decode, score, aggregate.

Rates are reported overall and per size, subset and hole ratio, with failure counts,
and the paper's "Sum" over the wait-ratio subsets. A policy behind an API reports the calls
that gave no answer (scored as empty responses); the summary records how many and the first
error, so a refused request is never mistaken for a weak model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envengineer.components import Verdict
from envengineer.fileio import atomic_open, dumps_json, write_json
from envengineer.metrics import Summary, summarize

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

    def subset_sum(self) -> dict[str, float]:
        """The paper's aggregate: per-subset rates added up (valid and optimal)."""
        subsets = self.summary.by.get("subset", {})
        return {
            "valid": round(sum(r.valid_rate for r in subsets.values()), 6),
            "optimal": round(sum(r.optimal_rate for r in subsets.values()), 6),
        }

    def to_summary_dict(self) -> dict[str, Any]:
        data = self.summary.to_dict()
        if self.summary.by.get("subset"):
            data["sum_over_subsets"] = self.subset_sum()
        data["settings"] = self.settings
        if self.report_calls or self.failed_calls:
            data["calls"] = self.calls
        return data


def spread(records: Sequence[Any], limit: int | None) -> list[Any]:
    """At most ``limit`` records, evenly spaced over the set (every size, subset and hole
    ratio stays represented, unlike the first ``limit`` lines of a file sorted by subset)."""
    items = list(records)
    if limit is None or limit >= len(items):
        return items
    step = len(items) / limit
    return [items[int(i * step)] for i in range(limit)]


def groups_of(generator: Any, record: Mapping[str, Any]) -> dict[str, str]:
    groups = {"size": generator.group(record)}
    if "subset" in record:
        groups["subset"] = str(record["subset"])
    if "hole_ratio" in record:
        groups["hole_ratio"] = f"{float(record['hole_ratio']):g}"
    return groups


def evaluate(
    policy: Any,
    generator: Any,
    validator: Any,
    records: Sequence[Mapping[str, Any]],
    *,
    style: str | None = None,
    batch_size: int = 64,
    progress: Callable[[int], None] | None = None,
) -> EvalResult:
    """Sample one response per record from ``policy`` and score it.

    ``batch_size`` prompts go to one ``sample`` call, unless the policy sets
    ``sample_batch_size`` (the ``vllm`` policy: every prompt in one call, one engine start).
    """
    style = style or getattr(policy.options, "prompt_style", None) or "full"
    batch_size = getattr(policy, "sample_batch_size", None) or batch_size
    failed_before = len(policy.failed_calls())
    responses: list[str] = []
    for start in range(0, len(records), batch_size):
        batch = records[start : start + batch_size]
        prompts = [generator.render(record, style) for record in batch]
        outputs = policy.sample(prompts, n=1)
        responses.extend(out[0] if out else "" for out in outputs)
        if progress:
            progress(len(batch))
    verdicts = [
        validator.score(record, generator.decode_response(record, response, style))
        for record, response in zip(records, responses)
    ]
    orders = {"size": generator.groups()}
    summary = summarize(verdicts, [groups_of(generator, r) for r in records], orders=orders)
    settings = {"policy": policy.name, "prompt_style": style, **_sampling(policy)}
    failed = list(policy.failed_calls())[failed_before:]
    return EvalResult(summary, verdicts, responses, list(records), settings, failed_calls=failed, report_calls=not policy.has_weights)


def _sampling(policy: Any) -> dict[str, Any]:
    options = getattr(policy, "options", None)
    if options is None:
        return {}
    keep = ("path", "model", "temperature", "top_p", "max_new_tokens", "max_tokens", "seed")
    dumped = options.model_dump() if hasattr(options, "model_dump") else {}
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in dumped.items() if k in keep}


def failing_examples(result: EvalResult, generator: Any, *, limit: int = 8, style: str = "full") -> list[dict[str, Any]]:
    """A few failing examples, spread over failure types, for the F module."""
    picked: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for record, verdict, response in zip(result.records, result.verdicts, result.responses):
        if verdict.valid or len(picked) >= limit:
            continue
        if seen.get(verdict.failure or "", 0) >= max(1, limit // 4):
            continue
        seen[verdict.failure or ""] = seen.get(verdict.failure or "", 0) + 1
        prompt = generator.render(record, "compact") if "compact" in getattr(generator, "prompt_styles", ()) else ""
        picked.append({
            "id": record.get("id"),
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
        handle.write("dimension,group,n,valid_rate,optimal_rate,valid_se\n")
        rows = [("overall", "all", result.summary.overall)]
        rows += [(dim, key, rates) for dim, values in result.summary.by.items() for key, rates in values.items()]
        for dim, key, rates in rows:
            d = rates.to_dict()
            handle.write(f"{dim},{key},{d['n']},{d['valid_rate']},{d['optimal_rate']},{d['valid_se']}\n")
    write_json(out / "summary.json", result.to_summary_dict())
