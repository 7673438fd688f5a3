"""Experiment trackers: per-run plugins that copy what the loop does to TensorBoard, W&B, MLflow, ...

A tracker is a :class:`Tracker` subclass registered by a plugin's ``register_trackers`` hook and
chosen per run by the run config's ``trackers`` list (``trackers: [tensorboard, wandb]``). It
implements the lifecycle hooks (``on_run_start``, ``on_benchmark_end``, ``on_design_end``,
``on_round_end``, ``on_run_end``: :mod:`envengineer.hookspecs`) as methods marked ``@hookimpl``,
with the same arguments and plain-data payloads as any plugin's hooks.

The loop calls each tracker on its own (:class:`TrackerSet`): a tracker that raises (its package
missing, the network down, a bad key, a writer failing) is disabled for the rest of the run with
one warning naming it and the reason, and the run goes on. The run directory stays the record;
a tracker only copies it elsewhere, and one named on a run with steps done first gets the events of
those steps it has not logged, rebuilt from the directory, once (``<run>/trackers/logged.json``). Keys come from the environment only: a warning never shows one
(:func:`redact`), and nothing here writes one to a file.

The helpers below turn the payloads into the scalars every built-in tracker logs, so the three
backends log the same names: ``validation/valid_rate``, ``bench/<set>/optimal_rate``,
``config/<group>/<knob>``, ``engineer/total_tokens``, ... (docs/trackers.md lists them).
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from envengineer.components import Tracker, TrackerUnavailable

logger = logging.getLogger(__name__)

#: The hooks a tracker may implement, in the order the loop calls them.
LIFECYCLE = ("on_run_start", "on_benchmark_end", "on_design_end", "on_round_end", "on_run_end")

#: Environment variables whose values never appear in a warning (names matching this).
SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.I)


def redact(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with the value of every environment variable named like a secret (``*KEY*``, ``*TOKEN*``,
    ``*SECRET*``, ``*PASSWORD*``) replaced by ``[REDACTED]``."""
    env = os.environ if environ is None else environ
    for name, value in env.items():
        if value and len(value) >= 4 and SECRET_NAME.search(name) and value in text:
            text = text.replace(value, "[REDACTED]")
    return text


class TrackerSet:
    """The trackers of one run, each called on its own: one that raises is disabled with one warning."""

    def __init__(self, trackers: Iterable[Tracker]) -> None:
        from envengineer import hookspecs
        from envengineer.plugin_manager import PluginManager

        self.pm = PluginManager()
        self.pm.add_hookspecs(hookspecs)
        self.live: list[Tracker] = []
        self.disabled: dict[str, str] = {}
        for tracker in trackers:
            try:
                self.pm.register(tracker, name=f"tracker {tracker.name}")
            except Exception as exc:  # a misnamed hook, an argument no hook has: a bug of the tracker's
                self._warn(tracker.name, f"it cannot be registered: {exc}")
                continue
            self.live.append(tracker)

    @property
    def names(self) -> list[str]:
        return [tracker.name for tracker in self.live]

    def call(self, hook: str, only: Iterable[str] | None = None, **kwargs: Any) -> list[str]:
        """Call ``hook`` on every live tracker that implements it (``only``: on those of these names), with the
        arguments it names; the names of the trackers that took it (one without the hook takes it as done)."""
        caller = getattr(self.pm.hook, hook)
        impls = {id(impl.plugin): impl for impl in caller.get_hookimpls()}
        wanted = None if only is None else set(only)
        took = []
        for tracker in list(self.live):
            if wanted is not None and tracker.name not in wanted:
                continue
            impl = impls.get(id(tracker))
            if impl is None:
                took.append(tracker.name)
                continue
            try:
                impl.function(*[kwargs.get(name) for name in impl.argnames])
            except Exception as exc:  # noqa: BLE001 - a tracker never fails the run
                self.disable(tracker, f"{hook} raised {type(exc).__name__}: {exc}" if not isinstance(exc, TrackerUnavailable) else str(exc))
                continue
            took.append(tracker.name)
        return took

    def disable(self, tracker: Tracker, reason: str) -> None:
        if tracker in self.live:
            self.live.remove(tracker)
        self._warn(tracker.name, reason)
        self._close(tracker)

    def _warn(self, name: str, reason: str) -> None:
        reason = redact(" ".join(str(reason).split()))
        self.disabled[name] = reason
        logger.warning("tracker %s disabled for the rest of the run: %s (the run goes on; its directory holds everything)", name, reason)

    @staticmethod
    def _close(tracker: Tracker) -> None:
        try:
            tracker.close()
        except Exception:  # noqa: BLE001 - already disabled, or ending: nothing more to say
            pass

    def trainer_settings(self) -> dict[str, dict[str, Any]]:
        """``{tracker: settings}`` of the live trackers that give a trainer something to write to."""
        out: dict[str, dict[str, Any]] = {}
        for tracker in list(self.live):
            try:
                settings = tracker.trainer_settings()
            except Exception as exc:  # noqa: BLE001
                self.disable(tracker, f"trainer_settings raised {type(exc).__name__}: {exc}")
                continue
            if settings is not None:
                out[tracker.name] = dict(settings)
        return out

    def close(self) -> None:
        for tracker in self.live:
            self._close(tracker)


# --------------------------------------------------------------------- what is logged


def number(value: Any) -> float | None:
    """``value`` as a float when it is a finite number or a bool (1.0 / 0.0), else None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(float(value)):
        return float(value)
    return None


def part(text: Any) -> str:
    """One segment of a metric name: no slashes or spaces."""
    return re.sub(r"[/\s]+", "_", str(text)) or "_"


RATE_KEYS = ("valid_rate", "optimal_rate", "mean_score")


def evaluation_scalars(prefix: str, evaluation: Mapping[str, Any], *, groupings: bool = True) -> dict[str, float]:
    """``prefix/valid_rate``, ``prefix/optimal_rate``, ``prefix/mean_score``; per group of each grouping
    (``prefix/<grouping>/<group>/valid_rate``: every grouping, or the set's subsets alone when
    ``groupings`` is false); the declared aggregate (``prefix/<key>/<metric>``)."""
    out: dict[str, float] = {}
    overall = evaluation.get("overall") or {}
    for key in RATE_KEYS:
        value = number(overall.get(key))
        if value is not None:
            out[f"{prefix}/{key}"] = value
    by = evaluation.get("by") or {}
    subsets = evaluation.get("subsets")
    for grouping, groups in by.items():
        if not groupings and grouping != subsets:
            continue
        for group, rates in (groups or {}).items():
            for key in ("valid_rate", "optimal_rate"):
                value = number((rates or {}).get(key))
                if value is not None:
                    out[f"{prefix}/{part(grouping)}/{part(group)}/{key}"] = value
    aggregate = evaluation.get("aggregate")
    if aggregate:
        for metric, value in (aggregate.get("values") or {}).items():
            value = number(value)
            if value is not None:
                out[f"{prefix}/{part(aggregate['key'])}/{part(metric)}"] = value
    return out


SIGNAL_KEYS = ("success", "mixed_share", "mean_score", "kept", "prompts", "samples", "mixed", "all_right", "all_wrong", "learnability")


def round_scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The scalars of a round (:func:`envengineer.hookspecs.on_round_end`'s ``metrics``), logged at step = the round."""
    out = evaluation_scalars("validation", metrics.get("validation") or {})
    sampled = number(metrics.get("sampled_pass1"))
    if sampled is not None:
        out["validation/sampled_pass1"] = sampled
    signal = metrics.get("signal") or {}
    for key in SIGNAL_KEYS:
        value = number((signal.get("overall") or {}).get(key))
        if value is not None:
            out[f"signal/{key}"] = value
    for grouping, groups in (signal.get("by") or {}).items():
        for group, cell in (groups or {}).items():
            for key in ("success", "mixed_share", "kept"):
                value = number((cell or {}).get(key))
                if value is not None:
                    out[f"signal/{part(grouping)}/{part(group)}/{key}"] = value
    train = metrics.get("train") or {}
    for key in ("kept_prompts", "optimizer_steps", "global_step"):
        value = number(train.get(key))
        if value is not None:
            out[f"round/{key}"] = value
    fallback = number(metrics.get("fallback"))
    if fallback is not None:
        out["round/design_fallback"] = fallback
    for group, knobs in (metrics.get("knob_values") or {}).items():
        for knob, value in (knobs or {}).items():
            value = number(value)
            if value is not None:
                out[f"config/{part(group)}/{part(knob)}"] = value
    return out


def design_scalars(design: Mapping[str, Any]) -> dict[str, float]:
    """The scalars of a design step (``on_design_end``'s ``design``), logged at step = the round it followed."""
    out: dict[str, float] = {}
    for key in ("fallback", "projection_changes", "calls", "seconds", "engineer_seconds"):
        value = number(design.get(key))
        if value is not None:
            out[f"engineer/{key}"] = value
    for key, value in (design.get("tokens") or {}).items():
        value = number(value)
        if value is not None:
            out[f"engineer/{part(key)}_tokens"] = value
    return out


def benchmark_prefix(benchmark: Mapping[str, Any]) -> str:
    """``bench/<set>``, ``base/bench/<set>``, or ``base/validation`` for the base policy's validation."""
    if benchmark.get("role") == "validation":
        return "base/validation"
    prefix = f"bench/{part(benchmark.get('name'))}"
    return f"base/{prefix}" if benchmark.get("round") is None else prefix


def benchmark_scalars(benchmark: Mapping[str, Any]) -> dict[str, float]:
    """The scalars of a benchmark evaluation (``on_benchmark_end``): overall, per subset, the aggregate.
    Step: the round, 0 for the base policy."""
    validation = benchmark.get("role") == "validation"
    return evaluation_scalars(benchmark_prefix(benchmark), benchmark, groupings=validation)


def benchmark_step(benchmark: Mapping[str, Any]) -> int:
    round = benchmark.get("round")
    return int(round) if isinstance(round, int) else 0


def curve_points(metrics: Mapping[str, Any]) -> list[tuple[int, dict[str, float]]]:
    """The round's ``curves.jsonl`` lines as ``(global step, {curves/<key>: value})``: the step within the
    round plus the optimizer steps of the rounds before, so the rounds' curves join up."""
    offset = int(number((metrics.get("train") or {}).get("step_offset")) or 0)
    points = []
    for line in metrics.get("curves") or []:
        step = number(line.get("step"))
        if step is None:
            continue
        values = {f"curves/{part(k)}": v for k, raw in line.items() if k not in ("step", "seconds") and (v := number(raw)) is not None}
        if values:
            points.append((offset + int(step), values))
    return points


def needs_curves(metrics: Mapping[str, Any], tracker: str) -> bool:
    """Whether ``tracker`` must log the round's curves itself: the trainer did not write its step metrics to it."""
    return tracker not in ((metrics.get("train") or {}).get("live_trackers") or [])


def hyperparameters(info: Mapping[str, Any]) -> dict[str, bool | int | float | str]:
    """The run config as flat hyperparameters (``trainer.learning_rate``: value; null as ``"null"``, lists as
    JSON text), with ``suite.table`` and ``suite.row``, and any value named like a secret ``[REDACTED]``."""
    import json

    out: dict[str, bool | int | float | str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        elif value is None:
            out[prefix] = "null"
        elif isinstance(value, (bool, int, float, str)):
            out[prefix] = value
        else:
            out[prefix] = json.dumps(value, sort_keys=True)

    walk("", redacted(info.get("config") or {}))
    suite = info.get("suite") or {}
    for key in ("table", "row"):
        if suite.get(key) is not None:
            out[f"suite.{key}"] = suite[key]
    return out


def display_name(info: Mapping[str, Any]) -> str:
    """``<arm>/seed-<seed>``: the suite row (an arm's name), or the run's name, and its seed."""
    suite = info.get("suite") or {}
    return f"{suite.get('row') or info.get('name')}/seed-{info.get('seed')}"


def group_name(info: Mapping[str, Any]) -> str | None:
    """The suite table the run is a row of (None outside a suite)."""
    return (info.get("suite") or {}).get("table")


def notes_text(design: Mapping[str, Any]) -> str:
    """The design step as Markdown: the engineer's note, whether it fell back, what the projection changed."""
    lines = [f"**round {design.get('round')}**, engineer {design.get('engineer')}: "
             + ("fell back (" + str(design.get("reason") or "") + ")" if design.get("fallback") else "applied")]
    if design.get("notes"):
        lines += ["", str(design["notes"])]
    changes = design.get("changes") or []
    if changes:
        lines += ["", "projection changes:"] + [f"- {c.get('field')}: {c.get('proposed')} → {c.get('applied')} ({c.get('reason')})" for c in changes]
    return "\n".join(lines)


def redacted(value: Any) -> Any:
    """A copy of a run config (nested mappings) with every value named like a secret replaced by ``[REDACTED]``
    (``api_key_env``, which names a variable, stays)."""
    if isinstance(value, Mapping):
        return {key: "[REDACTED]" if SECRET_NAME.search(str(key)) and not str(key).endswith("_env") else redacted(item)
                for key, item in value.items()}
    if isinstance(value, list):
        return [redacted(item) for item in value]
    return value


def state_path(run_dir: Any, tracker: str) -> Any:
    """``<run>/trackers/<tracker>.json``: what a tracker keeps to find its run again when the run resumes (ids, never keys)."""
    from pathlib import Path

    return Path(getattr(run_dir, "path", run_dir)) / "trackers" / f"{tracker}.json"


#: ``<run>/trackers/logged.json``: ``{tracker: [event, ...]}``, the events of the run each tracker has taken.
LOGGED = "logged.json"


def logged_path(run_dir: Any) -> Any:
    from pathlib import Path

    return Path(getattr(run_dir, "path", run_dir)) / "trackers" / LOGGED


def read_logged(run_dir: Any) -> dict[str, list[str]] | None:
    """``{tracker: [event, ...]}``: the run's events (``round/0``, ``design/0``, ``benchmark/base/<set>``, ...)
    each tracker took, as :func:`write_logged` recorded them; None: the run keeps no such record (none of its
    processes had a tracker, or it was recorded before the record was kept)."""
    import json

    try:
        data = json.loads(logged_path(run_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return {str(name): [str(e) for e in events] for name, events in data.items() if isinstance(events, list)}


def write_logged(run_dir: Any, logged: Mapping[str, Iterable[str]]) -> None:
    from envengineer.fileio import write_json

    write_json(logged_path(run_dir), {name: list(dict.fromkeys(events)) for name, events in sorted(logged.items())})


def read_state(run_dir: Any, tracker: str) -> dict[str, Any]:
    import json

    try:
        data = json.loads(state_path(run_dir, tracker).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_state(run_dir: Any, tracker: str, data: Mapping[str, Any]) -> None:
    from envengineer.fileio import write_json

    write_json(state_path(run_dir, tracker), dict(data))


# ----------------------------------------------------------------- replaying recorded events


def record_logged(run_dir: Any, event: str, trackers: Iterable[str]) -> None:
    """Record in ``trackers/logged.json`` that ``trackers`` took ``event``."""
    logged = read_logged(run_dir) or {}
    for name in trackers:
        logged.setdefault(name, []).append(event)
    write_logged(run_dir, logged)


def replay(trackers: TrackerSet, run_dir: Any, events: Sequence[tuple[str, str, Any]], selected_before: Iterable[str]) -> dict[str, int]:
    """Give each live tracker the recorded ``events`` it has not taken (``trackers/logged.json``; ``events``: the loop's
    ``(event, hook, payload)`` of the steps done, :meth:`envengineer.loop.steps.Loop.recorded_events`): a tracker newly
    named on a finished or resumed run logs the steps done before, once. A run recorded before the record was kept
    counts as taken by the trackers its ``run.yaml`` named (``selected_before``) and those that keep a state there.
    Returns how many events each tracker was given."""
    logged = read_logged(run_dir)
    if logged is None:
        folder = run_dir.path / "trackers"
        kept = {p.stem for p in folder.glob("*.json") if p.name != LOGGED} if folder.is_dir() else set()
        logged = {name: [event for event, _, _ in events] for name in sorted(set(selected_before) | kept)}
        write_logged(run_dir, logged)
    replayed: dict[str, int] = {}
    for event, hook, payload in events:
        missing = [name for name in trackers.names if event not in logged.get(name, ())]
        if not missing:
            continue
        took = trackers.call(hook, only=missing, run_dir=run_dir, **payload())
        record_logged(run_dir, event, took)
        for name in took:
            replayed[name] = replayed.get(name, 0) + 1
    return replayed

