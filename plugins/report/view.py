"""A read-only view of a run directory, finished or not, for reports and comparisons.

The loop writes the directory step by step, so a reader meets partial runs: rounds not
yet started, optional files absent (benchmarks, engineer notes), a history line cut by a
crash. :func:`load_run_view` never fails on those; it records what it could not read in
``RunView.problems`` and shows the rest.

The view also knows what the run's task declares (groupings, knobs, benchmark labels,
subsets and aggregates; see :mod:`envengineer.plugins.report.drawn`), resolved through the registry
from run.yaml's ``task`` section. A run whose task family is not installed is still shown,
with what its files hold, and a note in ``problems``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envengineer.plugins.report.drawn import BenchView, Dimension, KnobLayout, dimensions, knob_layout, sort_keys
from envengineer.errors import EnvEngineerError, InputError
from envengineer.store.records import latest_designs, noted_json, noted_jsonl, noted_text, noted_yaml, read_verdicts
from envengineer.store.rundir import RunDir

BASE = "base"

__all__ = ["BASE", "RunView", "Stage", "load_run_view", "rate", "sort_keys"]


@dataclass
class Stage:
    """The starting policy (``label == "base"``) or one round (``label == "00"``, ...)."""

    label: str
    index: int | None  # round number; None for base
    config: dict[str, Any] | None = None  # generator config of the round
    curves: list[dict[str, Any]] = field(default_factory=list)  # train/curves.jsonl
    eval: dict[str, Any] | None = None  # validation Summary.to_dict()
    bench: dict[str, dict[str, Any]] = field(default_factory=dict)  # benchmark name -> Summary.to_dict()
    summary_md: str | None = None  # the engineer's S note
    projection: dict[str, Any] | None = None  # engineer/projection.yaml
    verdicts: list[tuple[str, bool]] | None = None  # (id, valid) per validation verdict line, in order
    signal: dict[str, Any] | None = None  # train/signal.json: the round's training signal (None: none recorded)

    @property
    def title(self) -> str:
        return "base" if self.index is None else f"round {self.label}"


@dataclass
class RunView:
    path: Path
    config: dict[str, Any]  # run.yaml ({} when missing)
    history: list[dict[str, Any]]
    base: Stage
    rounds: list[Stage]  # rounds found on disk, in order
    problems: list[str] = field(default_factory=list)  # files that exist but could not be read
    task: str | None = None  # the task family's name (run.yaml's task section)
    generator: Any = None  # the task's Generator; None when its plugin is not installed here
    benchmarks: dict[str, Any] = field(default_factory=dict)  # name -> registered Benchmark (evaluation sets of the run)

    @property
    def stages(self) -> list[Stage]:
        return [self.base, *self.rounds]

    @property
    def name(self) -> str:
        return str(self.config.get("name") or self.path.resolve().name)

    @property
    def engineer(self) -> str:
        """The engineer's name, with its model when it has one (``openai:gpt-5``)."""
        engineer = self.config.get("engineer") or {}
        if not isinstance(engineer, dict):
            return str(engineer)
        name = str(engineer.get("name") or "?")
        model = engineer.get("model")
        return f"{name}:{model}" if model else name

    @property
    def rounds_planned(self) -> int | None:
        rounds = self.config.get("rounds")
        return rounds if isinstance(rounds, int) else None

    def last_eval(self) -> Stage | None:
        """The latest stage (base included) with a validation summary."""
        return next((s for s in reversed(self.stages) if s.eval is not None), None)

    def last_bench(self, name: str) -> Stage | None:
        """The latest stage with benchmark ``name``: the last round that ran it, else base."""
        return next((s for s in reversed(self.stages) if name in s.bench), None)

    def design_steps(self) -> list[tuple[int, bool, str, bool]]:
        """(round, fell back, reason, stopped the run) per design step, from history.jsonl, else projection.yaml."""
        lines = latest_designs(self.history)
        out = []
        for stage in self.rounds:
            line, projection = lines.get(stage.index or 0), stage.projection or {}
            source = line if line is not None and "fallback" in line else projection
            if "fallback" in source:
                out.append((stage.index or 0, bool(source["fallback"]), str(source.get("reason") or ""), bool((line or {}).get("halted"))))
        return out

    def bench_names(self) -> list[str]:
        """The run's benchmarks (those it lists and those on disk), in their declared order."""
        names = {n for s in self.stages for n in s.bench}
        return sort_benches(self.bench(n) for n in names | set(self.listed_benchmarks()))

    def listed_benchmarks(self) -> list[str]:
        evals = self.config.get("eval")
        listed = evals.get("benchmarks") if isinstance(evals, dict) else None
        return [str(n) for n in listed] if isinstance(listed, list) else []

    @property
    def validation_set(self) -> str | None:
        evals = self.config.get("eval")
        name = evals.get("validation") if isinstance(evals, dict) else None
        return str(name) if name else None

    # -- what the task declares (envengineer.plugins.report.drawn), with fallbacks from the files

    def bench(self, name: str) -> BenchView:
        """Benchmark ``name`` as tables show it: its declared label, order, subsets and aggregate
        (its name, no subsets and no aggregate when it is not registered here)."""
        return BenchView.of(name, self.benchmarks.get(name))

    def dimensions(self) -> list[Dimension]:
        """The groupings of the validation summaries: the task's declared ones, then the validation
        set's subsets, then any other ``by`` key the summaries hold."""
        spec = self.benchmarks.get(self.validation_set or "")
        extra = [spec.subsets] if spec is not None and spec.subsets is not None else []
        return dimensions(self.generator, [s.eval for s in self.stages], extra)

    def primary(self) -> Dimension | None:
        """The task's primary grouping (its evidence groups); without a task, the summaries' first ``by`` key."""
        dims = self.dimensions()
        return dims[0] if dims else None

    def knob_layout(self) -> KnobLayout | None:
        """Where the round configs keep the knobs, as the task declares (else as found in them)."""
        return knob_layout(self.generator, [s.config for s in self.rounds])


def sort_benches(views: Any) -> list[str]:
    """Benchmark names by their declared order, then name; undeclared ones last."""
    return [v.name for v in sorted(views, key=lambda v: v.sort_key)]


# ------------------------------------------------------------------ metrics


def rate(summary: dict[str, Any] | None, metric: str, *path: str) -> float | None:
    """``summary["by"][path...][metric]`` (or ``overall`` with no path) as a float, or None."""
    if not isinstance(summary, dict):
        return None
    node: Any = summary.get("overall") if not path else summary.get("by")
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    value = node.get(metric) if isinstance(node, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _summary(path: Path, problems: list[str]) -> dict[str, Any] | None:
    data = noted_json(path, problems)
    if data is None:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("overall"), dict):
        problems.append(f"{path}: not a summary (no 'overall' object); skipped")
        return None
    return data


def _stage(run: RunDir, round: int | None, problems: list[str]) -> Stage:
    stage = Stage(label=BASE if round is None else f"{round:02d}", index=round)
    if round is not None:
        config = noted_yaml(run.config_path(round), problems)
        stage.config = config if isinstance(config, dict) else None
        stage.curves = noted_jsonl(run.curves(round), problems)
        signal = noted_json(run.signal(round), problems)
        stage.signal = signal if isinstance(signal, dict) else None
    stage.eval = _summary(run.eval_summary(round), problems)
    if stage.eval is not None:
        stage.verdicts = read_verdicts(run.eval_verdicts(round), problems)
    for name in run.bench_names(round):
        if (summary := _summary(run.bench_dir(round, name) / "summary.json", problems)) is not None:
            stage.bench[name] = summary
    if round is not None:
        stage.summary_md = noted_text(run.summary_note(round), problems) or None
        projection = noted_yaml(run.projection(round), problems)
        stage.projection = projection if isinstance(projection, dict) else None
    return stage


def resolve_task(config: dict[str, Any], bench_names: Any, registry: Any, problems: list[str]) -> tuple[str | None, Any, dict[str, Any]]:
    """The run's task name, its generator (None when it cannot be built here) and the registered
    benchmarks among ``bench_names``; what is missing is noted in ``problems``."""
    section = config.get("task")
    name = section.get("name") if isinstance(section, dict) else section
    if not name:
        return None, None, {}
    name = str(name)
    if registry is None:
        from envengineer.registry import load_registry

        try:
            registry = load_registry()
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not cost the report
            problems.append(f"plugins could not be loaded ({exc}); groupings and knobs are shown as the files hold them")
            return name, None, {}
    generator = None
    if name not in registry.names("generator"):
        problems.append(f"task {name!r} is not installed here (no plugin registers it): groupings and knobs are shown as the files hold them")
    else:
        try:
            generator = registry.create("generator", name, section if isinstance(section, dict) else {}, where="task")
        except Exception:  # noqa: BLE001 - options of an older version: the declarations do not depend on them
            try:
                generator = registry.get("generator", name)()
            except Exception as exc:  # noqa: BLE001
                problems.append(f"task {name!r}: its generator could not be built ({exc}); groupings and knobs are shown as the files hold them")
    known = set(registry.names("benchmark"))
    benchmarks = {b: registry.benchmark(b) for b in bench_names if b in known}
    return name, generator, benchmarks


def load_run_view(run_dir: str | Path, registry: Any = None) -> RunView:
    """Read everything a run directory holds so far; raise only if it is not a run directory.

    ``registry`` resolves the run's task and benchmarks (default: the installed plugins)."""
    path = Path(run_dir)
    if not path.is_dir():
        raise InputError(f"{path}: no such run directory")
    problems: list[str] = []
    run = RunDir(path)
    config = noted_yaml(run.run_yaml, problems)
    rounds = [_stage(run, n, problems) for n in run.rounds_on_disk()]
    base = _stage(run, None, problems)
    if not isinstance(config, dict) and not rounds and base.eval is None:
        raise EnvEngineerError(f"{path}: not a run directory (no run.yaml, base/ or round-NN/)")
    view = RunView(
        path=path,
        config=config if isinstance(config, dict) else {},
        history=noted_jsonl(run.history_path, problems),
        base=base,
        rounds=rounds,
        problems=problems,
    )
    names = {n for s in view.stages for n in s.bench} | set(view.listed_benchmarks())
    names |= {view.validation_set} if view.validation_set else set()
    view.task, view.generator, view.benchmarks = resolve_task(view.config, sorted(names), registry, problems)
    return view
