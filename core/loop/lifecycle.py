"""The lifecycle hooks' payloads, as plain JSON data read back from the run directory.

Each builder reads what the step wrote (``summary.json``, ``signal.json``, ``config.yaml``,
``projection.yaml``, ``calls.jsonl``, ``history.jsonl``), so a payload says exactly what the files
say, a resumed run builds the same one, and a plugin never holds the loop's objects. Each payload is
built through its model in :mod:`envengineer.loop.payloads` (the contract: a missing, renamed or undeclared
key raises here) and handed on as the model's plain JSON dump; docs/writing-a-plugin.md lists the keys.
"""

from __future__ import annotations

import builtins
import json
import math
from pathlib import Path
from typing import Any

from envengineer.loop.payloads import BenchmarkPayload, DesignPayload, RoundPayload, RunEndPayload, RunStartPayload, build
from envengineer.store.rundir import RunDir, Step


def plain(value: Any) -> Any:
    """A JSON-safe copy of ``value``: mappings with string keys, lists, finite numbers, str, bool, None
    (tuples become lists, paths and other objects their text, NaN and infinities None)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if hasattr(value, "model_dump"):
        return plain(value.model_dump(mode="json"))
    return str(value)


def _json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _yaml(path: Path) -> Any:
    import yaml

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def knob_values(generator: Any, config: Any) -> dict[str, dict[str, Any]]:
    """``{group: {knob: value}}`` of the task's declared knobs in ``config`` (a mapping or model): the
    generator's ``knob_rows`` (a task whose knobs are top-level fields gives one group, ``all``)."""
    if generator is None or config is None:
        return {}
    try:
        return plain(generator.knob_rows(config))
    except Exception:  # a task's own method: a payload must not fail the run
        return {}


# ----------------------------------------------------------------------- evaluations


def evaluation(summary_path: Path, name: str, benchmark: Any = None) -> dict[str, Any]:
    """A set's evaluation as a payload: its ``summary.json`` (``overall``, ``by``) with the set's label,
    subsets and declared aggregate (``{key, title, how, values}``)."""
    summary = _json(summary_path) or {}
    aggregate = None
    declared = getattr(benchmark, "aggregate", None)
    if declared is not None and isinstance(summary.get(declared.key), dict):
        aggregate = {"key": declared.key, "title": declared.title, "how": declared.how, "values": summary[declared.key]}
    subsets = getattr(benchmark, "subsets", None)
    return plain({
        "name": name,
        "label": getattr(benchmark, "display_label", None) or name,
        "overall": summary.get("overall") or {},
        "by": summary.get("by") or {},
        "subsets": subsets.name if subsets is not None else None,
        "aggregate": aggregate,
        "summary": str(summary_path),
    })


def benchmark_info(run_dir: RunDir, round: int | None, name: str, benchmark: Any, role: str) -> dict[str, Any]:
    """The payload of :func:`envengineer.hookspecs.on_benchmark_end`."""
    path = (run_dir.eval_summary(round) if role == "validation" else run_dir.bench_dir(round, name) / "summary.json")
    return build(BenchmarkPayload, {**evaluation(path, name, benchmark), "role": role, "round": round})


# ---------------------------------------------------------------------------- start


def run_info(config: Any, run_dir: RunDir, generator: Any, *, resumed: bool, trackers: list[str]) -> dict[str, Any]:
    """The payload of :func:`envengineer.hookspecs.on_run_start`."""
    knobs = [
        {"name": k.name, "low": k.low, "high": k.high, "step": k.step, "integer": k.integer, "harder": k.harder, "share": k.share}
        for k in getattr(generator, "knobs", ())
    ]
    suite = config.suite.model_dump(mode="json") if config.suite is not None else None
    return build(RunStartPayload, plain({
        "name": config.name,
        "run_dir": str(run_dir.path),
        "resumed": resumed,
        "config": config.model_dump(mode="json"),
        "suite": suite,
        "seed": config.seed,
        "rounds": config.rounds,
        "task": config.task.get("name"),
        "engineer": config.engineer.get("name"),
        "policy": config.policy.get("name"),
        "trainer": config.trainer.get("name"),
        "validation": config.eval.validation,
        "benchmarks": list(config.eval.benchmarks),
        "trackers": trackers,
        "knobs": knobs,
        "knob_table": getattr(generator, "knob_table", None),
    }))


# ---------------------------------------------------------------------------- round


def step_offset(run_dir: RunDir, round: int) -> int:
    """Optimizer steps of the rounds before ``round``, as their train lines of ``history.jsonl`` record them."""
    total = 0
    for earlier in range(round):
        line = run_dir.done(Step.TRAIN, earlier) or {}
        steps = line.get("steps")
        if isinstance(steps, (int, float)) and not isinstance(steps, bool):
            total += int(steps)
    return total


def _curves(path: Path) -> list[dict[str, Any]]:
    lines = []
    text = _text(path) or ""
    for raw in text.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict):
            lines.append(plain(line))
    return lines


def round_metrics(run_dir: RunDir, round: int, generator: Any, validation: str, benchmark: Any) -> dict[str, Any]:
    """The payload of :func:`envengineer.hookspecs.on_round_end`."""
    eval_line = run_dir.done(Step.EVAL, round) or {}
    design = run_dir.done(Step.DESIGN, round) or {}
    train_line = run_dir.done(Step.TRAIN, round) or {}
    signal = _json(run_dir.signal(round))
    steps = train_line.get("steps")
    steps = int(steps) if isinstance(steps, (int, float)) and not isinstance(steps, bool) else None
    kept = train_line.get("trained_prompts")
    if not isinstance(kept, (int, float)) or isinstance(kept, bool):
        kept = ((signal or {}).get("overall") or {}).get("kept")
    offset = step_offset(run_dir, round)
    live = train_line.get("live_trackers")
    config_path = run_dir.config_path(round)
    config = _yaml(config_path)
    return build(RoundPayload, plain({
        "valid_rate": eval_line.get("valid_rate"),
        "optimal_rate": eval_line.get("optimal_rate"),
        "fallback": design.get("fallback"),
        "round": round,
        "n": eval_line.get("n"),
        "sampled_pass1": eval_line.get("sampled_pass1"),
        "validation": evaluation(run_dir.eval_summary(round), validation, benchmark),
        "signal": signal,
        "train": {
            "kept_prompts": kept,
            "optimizer_steps": steps,
            "step_offset": offset,
            "global_step": offset + (steps or 0),
            "live_trackers": [name for name in live.split(",") if name] if isinstance(live, str) else [],
            "metrics": {k: v for k, v in train_line.items() if k not in ("round", "step", "time")},
        },
        "curves": _curves(run_dir.curves(round)),
        "config": config,
        "config_yaml": _text(config_path),
        "knob_values": knob_values(generator, config),
    }))


# --------------------------------------------------------------------------- design


def design_info(run_dir: RunDir, round: int, line: dict[str, Any], generator: Any) -> dict[str, Any]:
    """The payload of :func:`envengineer.hookspecs.on_design_end`, from the files the design step wrote
    (redacted as written) and its history ``line``."""
    folder = run_dir.engineer_dir(round)
    projection = _yaml(folder / "projection.yaml")
    projection = projection if isinstance(projection, dict) else {}
    calls = []
    for raw in (_text(folder / "calls.jsonl") or "").splitlines():
        try:
            call = json.loads(raw)
        except ValueError:
            continue
        if isinstance(call, dict):
            calls.append(call)
    tokens: dict[str, int] = {}
    for call in calls:
        usage = call.get("usage")
        if isinstance(usage, dict):
            for key, name in (("prompt_tokens", "prompt"), ("completion_tokens", "completion"), ("reasoning_tokens", "reasoning")):
                value = usage.get(key)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    tokens[name] = tokens.get(name, 0) + int(value)
    if tokens:
        tokens["total"] = tokens.get("prompt", 0) + tokens.get("completion", 0)
    latencies = [c["latency_s"] for c in calls if isinstance(c.get("latency_s"), (int, float))]
    models = [c["model"] for c in calls if isinstance(c.get("model"), str) and c["model"]]
    api_calls = [c for c in calls if c.get("attempt") is not None and c.get("model") not in (None, "")]
    notes = _text(folder / "summary.md")
    config = projection.get("config")
    return build(DesignPayload, plain({
        "round": round,
        "engineer": line.get("engineer"),
        "model": models[0] if models else None,
        "fallback": bool(line.get("fallback")),
        "reason": line.get("reason") or "",
        "halted": bool(line.get("halted")),
        "proposal": _yaml(folder / "proposal.yaml"),
        "accepted": projection.get("accepted") or [],
        "changes": projection.get("changes") or [],
        "projection_changes": line.get("projection_changes", 0),
        "config": config,
        "knob_values": knob_values(generator, config),
        "notes": notes.strip() if notes and notes.strip() else None,
        "tokens": tokens or None,
        "calls": len(api_calls),
        "engineer_seconds": builtins.round(sum(latencies), 3) if latencies else None,
        "seconds": line.get("duration_s"),
    }))


# ---------------------------------------------------------------------------- end


def run_end(rounds: list[dict[str, Any]], status: str, error: str | None) -> dict[str, Any]:
    """The payload of :func:`envengineer.hookspecs.on_run_end`: the per-round table, ``finished``, ``failed`` or
    ``interrupted``, and the error's message."""
    return build(RunEndPayload, plain({"rounds": rounds, "status": status, "error": error}))
