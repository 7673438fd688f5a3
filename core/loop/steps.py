"""The closed loop: train → eval → design, round after round, resumable at every step.

Round ``n`` trains the policy on a set drawn from config ``C_n``, evaluates the new
checkpoint on the validation set (and benchmarks), then asks the engineer for
``C_{n+1}`` from the evidence. Every step reads its inputs from the run directory
and leaves its outputs there, so a killed run resumes where it stopped and gives the
results an uninterrupted run would (same seeds, same data, same metrics).

An LLM engineer that falls back ``design.max_fallbacks`` times in a row stops the run
(:class:`FallbackLimitError`): a missing key or a wrong model would otherwise turn the
experiment silently into the fixed baseline. The stopping design step is recorded, and
redone when the run is resumed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from envengineer.display import Console, progress_bar, stage_progress
from envengineer.errors import ConfigError, EnvEngineerError
from envengineer.fileio import read_jsonl, read_yaml, write_json, write_jsonl, write_yaml
from envengineer.components.metrics import Rates
from envengineer.store.records import design_alarm, fallback_streak, latest_designs, paired_with_base, read_verdicts
from envengineer.registry import Registry
from envengineer.store.rundir import RunDir, Step, clock
from envengineer.loop.runconfig import ResolvedRun, parse_run_config

#: Settings that decide whether a run stops, never what it produces: a resumed run may change them.
GUARDS = (("design", "max_fallbacks"),)
#: Top-level fields that only say where else the run is logged: a resumed run may change them too.
UNTRACKED = ("trackers",)


class FallbackLimitError(EnvEngineerError):
    """An LLM engineer fell back ``design.max_fallbacks`` times in a row: the experiment is broken."""


def round_seed(seed: int, round: int) -> int:
    return seed * 1_000_003 + round


def run_identity(data: Any) -> dict[str, Any]:
    """What makes two run configs the same run: read through the model (a field added since,
    at its default, is no difference), guards left out. Unreadable data is compared as written."""
    try:
        data = parse_run_config(data).model_dump(mode="json")
    except ConfigError:
        pass
    out = dict(data) if isinstance(data, dict) else {}
    for key in UNTRACKED:
        out.pop(key, None)
    for section, key in GUARDS:
        if isinstance(out.get(section), dict):
            out[section] = {k: v for k, v in out[section].items() if k != key}
    return out


@dataclass
class Loop:
    run: ResolvedRun
    registry: Registry
    console: Console = field(default_factory=Console)

    def __post_init__(self) -> None:
        self.dir = RunDir(self.run.run_dir)
        self.cfg = self.run.config
        self.style = self.run.policy.prompt_style
        # one rendering of chat prompts for training, evaluation and the checkpoint/base engineers
        self.chat_template_kwargs = self.run.policy.chat_template_kwargs
        self.hook = self.registry.pm.hook
        from envengineer.loop.trackers import TrackerSet

        self.trackers = TrackerSet(self.run.trackers)
        self.tracking = False  # the trackers started (a dry run starts none)

    # ------------------------------------------------------------- helpers
    def _progress(self, description: str, total: int):
        return progress_bar(description, total, console=self.console, transient=True)

    def _finish(self, step: Step, round: int | None, started: tuple[float, float], **fields: Any) -> dict[str, Any]:
        line = self.dir.record(step, round, started, **fields)
        self.hook.on_step_end(run_dir=self.dir, round=round, step=step, record=line)
        return line

    def _emit(self, hook: str, event: str | None = None, **kwargs: Any) -> None:
        """A lifecycle hook: the plugins' implementations, then each of the run's trackers on its own.
        ``event``: the step's name in ``trackers/logged.json``, where the trackers that took it are recorded."""
        from envengineer.loop.trackers import record_logged

        getattr(self.hook, hook)(run_dir=self.dir, **kwargs)
        if self.tracking:
            took = self.trackers.call(hook, run_dir=self.dir, **kwargs)
            if event is not None and took:  # a run without trackers rewrites no record at every step
                record_logged(self.dir, event, took)

    def _benchmark_end(self, round: int | None, name: str, role: str) -> None:
        event, hook, payload = self._benchmark_event(round, name, role)
        self._emit(hook, event, **payload())

    def _benchmark_event(self, round: int | None, name: str, role: str) -> tuple[str, str, Any]:
        from envengineer.loop.lifecycle import benchmark_info

        def payload() -> dict[str, Any]:
            return {"round": round, "benchmark": benchmark_info(self.dir, round, name, self.registry.benchmark(name), role)}

        return f"{role}/{'base' if round is None else round}/{name}", "on_benchmark_end", payload

    def recorded_events(self) -> list[tuple[str, str, Any]]:
        """The lifecycle events of the steps the run directory records as done, in the order the loop emitted
        them: ``(event, hook, payload)``, ``payload()`` the hook's arguments rebuilt from the files (the same
        payloads the steps gave: every payload is read back from what the step wrote)."""
        from envengineer.loop.lifecycle import design_info

        events = []
        if self.dir.done(Step.BASE_EVAL):
            events.append(self._benchmark_event(None, self.cfg.eval.validation, "validation"))
            if self._benchmarks_due(None):
                events += [self._benchmark_event(None, name, "benchmark") for name in self.cfg.eval.benchmarks]
        for round in range(self.cfg.rounds):
            if self._benchmarks_due(round) and self.dir.done(Step.BENCH, round):
                events += [self._benchmark_event(round, name, "benchmark") for name in self.cfg.eval.benchmarks]
            line = self.dir.done(Step.DESIGN, round)
            if line and round < self.cfg.rounds - 1:
                events.append((f"design/{round}", "on_design_end",
                               lambda r=round, l=line: {"round": r, "design": design_info(self.dir, r, l, self.run.generator)}))
            if self.dir.done(Step.ROUND_END, round):
                events.append((f"round/{round}", "on_round_end", lambda r=round: {"round": r, "metrics": self.round_metrics(r)}))
        return events

    def _benchmark_records(self, name: str) -> list[dict[str, Any]]:
        bench = self.registry.benchmark(name)
        from envengineer.loop.evaluation import spread

        return spread(read_jsonl(bench.path), self.cfg.eval.limit)

    def _evaluate(self, policy: Any, name: str, out: Path, label: str, examples: bool,
                  records: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        from envengineer.loop.evaluation import evaluate, failing_examples, write_eval

        records = self._benchmark_records(name) if records is None else records
        progress, advance = self._progress(f"{label}: {name}", len(records))
        with progress:
            result = evaluate(
                policy, self.run.generator, self.run.validator, records, style=self.style, progress=advance,
                benchmark=self.registry.benchmark(name),
            )
        if examples:  # the validation set: sampled pass@1 beside the greedy rates, when asked for
            result.sampled = self._sampled(policy, records, label, name)
        picked = failing_examples(result, self.run.generator, limit=self.cfg.eval.examples) if examples else None
        with self.dir.building(out) as partial:
            write_eval(partial, result, picked)
        return result.to_summary_dict()

    def _sampled(self, policy: Any, records: list[dict[str, Any]], label: str, name: str) -> dict[str, Any] | None:
        """Sampled pass@1 on ``records`` at the trainer's temperature (``eval.sampled`` answers each), or None
        when off; a policy or trainer that cannot say how it samples is recorded as such."""
        from envengineer.loop.evaluation import sampled_pass1

        n = self.cfg.eval.sampled
        if not n:
            return None
        temperature = self.run.trainer.sampling_temperature
        sampler = policy.sampling(temperature=temperature, seed=self.cfg.seed) if temperature is not None else None
        if sampler is None:
            why = "the trainer does not say its sampling temperature" if temperature is None else f"policy {policy.name} cannot sample another way"
            return {"n": n, "pass1": None, "skipped": why}
        progress, advance = self._progress(f"{label}: {name} sampled ×{n}", len(records))
        with progress:
            result = sampled_pass1(sampler, self.run.generator, self.run.validator, records, n=n, temperature=temperature,
                                   style=self.style, progress=advance)
        sampler.close()
        return result

    def _evaluate_base(self, policy: Any, reuse: dict[str, Any] | None, name: str, out: Path, label: str, examples: bool) -> dict[str, Any]:
        """:meth:`_evaluate`, copied from the cache when the same base weights were already evaluated
        on the same records the same way (``reuse``: :func:`~envengineer.loop.evaluation.reuse_key`): the arms of a
        suite share one base, and each would otherwise spend the same minutes on the same answers."""
        import json

        from envengineer.loop.evaluation import cache_evaluation, cached_evaluation, evaluation_cache_key

        if reuse is None:
            return self._evaluate(policy, name, out, label, examples)
        records = self._benchmark_records(name)
        key = evaluation_cache_key(reuse, name, self.cfg.eval.examples if examples else None, records)
        cached = cached_evaluation(self.dir, out, key)
        if cached is not None:
            self.console.print(f"[dim]{escape(label)}: {escape(name)} reused from {escape(str(cached))} (same weights, records and options)[/]")
            return json.loads((out / "summary.json").read_text())
        summary = self._evaluate(policy, name, out, label, examples, records)
        cache_evaluation(out, key)
        return summary

    def _benchmarks_due(self, round: int | None) -> bool:
        when = self.cfg.eval.bench_rounds
        if not self.cfg.eval.benchmarks or when == "none":
            return False
        return round is None or when == "all" or round == self.cfg.rounds - 1

    def base_path(self) -> Path:
        path = self.dir.base_policy()
        if path is None:
            raise EnvEngineerError(f"{self.dir.history_path}: no pretrain step records the base policy")
        return path

    # --------------------------------------------------------------- steps
    def start(self, *, track: bool = True) -> None:
        """Write run.yaml, or check that the directory holds this same run; then start the trackers
        (``track``: a dry run starts none) and call ``on_run_start``."""
        from envengineer.loop.lifecycle import run_info

        resolved = self.cfg.model_dump(mode="json")
        resumed = self.dir.run_yaml.exists()
        selected_before: list[str] = []
        if self.dir.run_yaml.exists():
            existing = read_yaml(self.dir.run_yaml)
            selected_before = _tracker_names(existing.get("trackers") if isinstance(existing, dict) else None)
            ours, theirs = run_identity(resolved), run_identity(existing)
            if theirs != ours:
                changed = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
                raise ConfigError(
                    f"{self.dir.run_yaml}: the run directory holds a different run (fields differ: {', '.join(changed)}); "
                    "resume with the same config or choose another output"
                )
            if existing != resolved:
                write_yaml(self.dir.run_yaml, resolved)  # record the guard now in force
        else:
            write_yaml(self.dir.run_yaml, resolved)
        for path in self.dir.clean():
            self.console.print(f"[dim]removed half-built {escape(str(path.relative_to(self.dir.path)))} (left by an interrupted run)[/]")
        self.tracking = track and bool(self.trackers.live)
        info = run_info(self.cfg, self.dir, self.run.generator, resumed=resumed, trackers=self.trackers.names if track else [])
        self._emit("on_run_start", config=self.cfg, info=info)
        if self.tracking:
            from envengineer.loop.trackers import replay

            for name, count in replay(self.trackers, self.dir, self.recorded_events(), selected_before).items():
                self.console.print(f"[dim]tracker {escape(name)}: replayed {count} recorded event(s) it had not logged, "
                                   "from the run directory[/]")

    def pretrain(self) -> None:
        if self.dir.done(Step.PRETRAIN):
            return
        started = clock()
        self.console.print("[bold]preparing the starting policy[/]")
        with stage_progress(self.console) as progress:
            path = self.run.policy.prepare(generator=self.run.generator, progress=progress)
        self._finish(Step.PRETRAIN, None, started, base=str(Path(path).resolve()))

    def base_eval(self) -> None:
        if self.dir.done(Step.BASE_EVAL):
            return
        started = clock()
        policy = self.run.policy.with_path(self.base_path())
        from envengineer.loop.evaluation import reuse_key

        reuse = reuse_key(self.run, policy)
        summary = self._evaluate_base(policy, reuse, self.cfg.eval.validation, self.dir.eval_dir(None), "base eval", examples=True)
        benched = self._benchmarks_due(None)
        if benched:
            for name in self.cfg.eval.benchmarks:
                self._evaluate_base(policy, reuse, name, self.dir.bench_dir(None, name), "base bench", examples=False)
        self._finish(Step.BASE_EVAL, None, started, n=summary["overall"]["n"], valid_rate=summary["overall"]["valid_rate"],
                     optimal_rate=summary["overall"]["optimal_rate"], **_sampled_field(summary))
        self._benchmark_end(None, self.cfg.eval.validation, "validation")
        for name in self.cfg.eval.benchmarks if benched else ():
            self._benchmark_end(None, name, "benchmark")

    def initial_config(self) -> Any:
        generator = self.run.generator
        choice = self.cfg.initial_config or self.run.context_initial
        if choice == "uniform":
            return generator.default_config()
        if choice == "random":
            return generator.random_config(self.cfg.seed)
        from envengineer.store.configs import load_generator_config

        return load_generator_config(generator, choice)

    def config_of(self, round: int) -> Any:
        path = self.dir.config_path(round)
        if round == 0 and not path.exists():
            write_yaml(path, self.initial_config().model_dump(mode="json"))
        from envengineer.store.configs import load_generator_config

        # the round-0 file was checked when initial_config() read the user's choice; what the loop
        # wrote is read back as written (a run recorded before the bounds check still resumes)
        return load_generator_config(self.run.generator, path, check_bounds=False)

    def generate(self, round: int) -> None:
        if self.dir.done(Step.GENERATE, round):
            return
        started = clock()
        config = self.config_of(round)
        progress, advance = self._progress(f"round {round}: generating {self.cfg.budget} instances", self.cfg.budget)
        with progress:
            result = self.run.generator.generate(config, n=self.cfg.budget, seed=round_seed(self.cfg.seed, round), progress=advance)
        write_jsonl(self.dir.train_set(round), result.records)
        self._finish(Step.GENERATE, round, started, n=len(result.records), discarded=result.discarded)

    def train(self, round: int) -> None:
        if self.dir.done(Step.TRAIN, round):
            return
        started = clock()
        target = self.dir.train_dir(round)
        with self.dir.building(target) as partial:
            request = self.train_request(round, partial)
            self.console.print(
                f"[bold]round {round}: training[/] on {len(request.records)} instances from {escape(str(request.policy_path))}"
            )
            result = self.run.trainer.train(request)
            signal = self._signal(round, partial, request.records)
            details = {
                "full": dict(self.run.trainer.describe()),
                "bookkeeping": {"round": round, "rounds_total": self.cfg.rounds, "budget": self.cfg.budget,
                                "budget_mode": self.cfg.budget_mode, **_bookkeeping(self.run.trainer, result)},
                **({"launch": dict(result.launch)} if result.launch else {}),
            }
            if signal is not None:
                write_json(partial / self.dir.signal(round).name, signal)
            write_json(partial / self.dir.train_details(round).name, details)
            checkpoint = Path(result.checkpoint).resolve()
            if not checkpoint.is_dir():
                raise EnvEngineerError(f"trainer {self.run.trainer.name}: the checkpoint it returned, {checkpoint}, is not a folder")
            try:  # inside the round's folder: recorded relative to it (the folder is renamed when complete)
                checkpoint = checkpoint.relative_to(partial.resolve())
            except ValueError:
                pass  # elsewhere (e.g. shared storage): recorded as it is
        metrics = {k: v for k, v in (result.metrics or {}).items() if isinstance(v, (int, float, str)) and k != "checkpoint"}
        self._finish(Step.TRAIN, round, started, checkpoint=str(checkpoint), **metrics)

    def _signal(self, round: int, folder: Path, records: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The trainer's ``rollouts.jsonl`` in ``folder`` aggregated by the task's groupings (None: it wrote none);
        ``records``: the round's training set, to which the trainer's draws (``drawn.jsonl``) are added."""
        from envengineer.loop.signal import aggregate, check_line

        path = folder / self.dir.rollouts(round).name
        if not path.exists():
            return None
        lines = [check_line(line, f"{path}:{i + 1}") for i, line in enumerate(read_jsonl(path))]
        drawn = folder / self.dir.drawn(round).name
        if drawn.exists():
            records = [*records, *read_jsonl(drawn)]
        return aggregate(lines, records, self.run.generator)

    def draw_fn(self, round: int, out_dir: Path) -> Any:
        """``draw(n, part)`` for round ``round``: fresh instances from its config, kept in ``out_dir/drawn.jsonl``."""
        from envengineer.fileio import dumps_json

        config = self.config_of(round)
        path = out_dir / self.dir.drawn(round).name

        def draw(n: int, part: int) -> list[dict[str, Any]]:
            if part < 1:
                raise ValueError(f"draw: part {part}: parts start at 1 (part 0 is the round's train.jsonl)")
            seed = round_seed(self.cfg.seed, round) * 1_000 + 500 + part
            records = self.run.generator.generate(config, n=n, seed=seed).records
            with open(path, "a", encoding="utf-8") as handle:  # inside the round's .partial folder
                handle.writelines(dumps_json(r) + "\n" for r in records)
            return records

        return draw

    def train_request(self, round: int, out_dir: Path) -> Any:
        """What the trainer gets for ``round``: the round's set, the model it starts from, the validation set."""
        from envengineer.loop.lifecycle import step_offset
        from envengineer.components.training import TrainRequest

        kept = self.cfg.budget_mode == "kept_prompts"
        return TrainRequest(
            budget_mode=self.cfg.budget_mode, kept_target=self.cfg.budget if kept else 0,
            max_draws=int(self.cfg.draw_cap * self.cfg.budget) if kept else 0, draw=self.draw_fn(round, out_dir) if kept else None,
            policy_path=self.base_path() if round == 0 else self.dir.checkpoint(round - 1),
            records=read_jsonl(self.dir.train_set(round)),
            generator=self.run.generator, validator=self.run.validator,
            out_dir=out_dir, seed=round_seed(self.cfg.seed, round), round=round, prompt_style=self.style,
            chat_template_kwargs=self.chat_template_kwargs,
            validation_records=self._benchmark_records(self.cfg.eval.validation),
            task=dict(self.cfg.task),
            trackers=self.trackers.trainer_settings() if self.tracking else {},
            step_offset=step_offset(self.dir, round),
        )

    def plan(self) -> dict[str, Any]:
        """A dry run: prepare the starting policy and round 0's set as the run would (both are reused by it), then
        ask the trainer for its plan (for verl: the data files and the exact command), launching nothing."""
        self.start(track=False)
        self.pretrain()
        self.generate(0)
        out = self.dir.dry_run_dir()
        out.mkdir(parents=True, exist_ok=True)
        plan = self.run.trainer.plan(self.train_request(0, out))
        if plan is None:
            plan = {"trainer": self.run.trainer.name, "launches": "nothing: it trains in this process", "settings": dict(self.run.trainer.describe())}
        write_json(out / "plan.json", plan)
        return plan

    def eval(self, round: int) -> None:
        if self.dir.done(Step.EVAL, round):
            return
        started = clock()
        policy = self.run.policy.with_path(self.dir.checkpoint(round))
        summary = self._evaluate(policy, self.cfg.eval.validation, self.dir.eval_dir(round), f"round {round} eval", examples=True)
        self._finish(Step.EVAL, round, started, n=summary["overall"]["n"], valid_rate=summary["overall"]["valid_rate"],
                     optimal_rate=summary["overall"]["optimal_rate"], **_sampled_field(summary))

    def bench(self, round: int) -> None:
        if not self._benchmarks_due(round) or self.dir.done(Step.BENCH, round):
            return
        started = clock()
        policy = self.run.policy.with_path(self.dir.checkpoint(round))
        results = {}
        for name in self.cfg.eval.benchmarks:
            summary = self._evaluate(policy, name, self.dir.bench_dir(round, name), f"round {round} bench", examples=False)
            results[name] = {"valid_rate": summary["overall"]["valid_rate"], "optimal_rate": summary["overall"]["optimal_rate"]}
        self._finish(Step.BENCH, round, started, benchmarks=results)
        for name in self.cfg.eval.benchmarks:
            self._benchmark_end(round, name, "benchmark")

    def design(self, round: int) -> None:
        if round >= self.cfg.rounds - 1:
            return
        line = self.dir.done(Step.DESIGN, round)
        # A design that stopped the run is redone on resume: the user has fixed the cause.
        if line and not line.get("halted"):
            return
        from envengineer.design.step import design
        from envengineer.design.prompts import build_request
        from envengineer.design.evidence import load_evidence

        started = clock()
        evidence = load_evidence(self.dir.path, round, self.registry)
        request = build_request(
            evidence, self.registry, self.run.context,
            current_config=self.config_of(round),
            policy_path=str(self.dir.checkpoint(round)), base_policy_path=str(self.base_path()),
            prompt_path=self.cfg.design.prompt_file, seed=round_seed(self.cfg.seed, round),
            chat_template_kwargs=self.chat_template_kwargs, engineer=self.run.engineer, run_dir=str(self.dir.path),
        )
        with self.dir.building(self.dir.engineer_dir(round)) as partial:
            outcome = design(self.run.engineer, request, out_dir=partial, reask=self.cfg.design.reask, summarize=self.cfg.design.summary)
        write_yaml(self.dir.config_path(round + 1), outcome.config.model_dump(mode="json"))
        changes = len(outcome.projection.changes) if outcome.projection is not None else 0
        streak = [*fallback_streak(latest_designs(self.dir.history()), round - 1), round] if outcome.fallback else []
        limit = self.cfg.design.max_fallbacks
        halt = self.run.engineer.uses_llm and limit is not None and len(streak) >= limit
        line = self._finish(Step.DESIGN, round, started, engineer=self.run.engineer.name, fallback=outcome.fallback, reason=outcome.reason,
                            projection_changes=changes, **({"halted": True} if halt else {}),
                            **({"prompt_cuts": len(request.budget["cuts"])} if request.budget is not None else {}))
        from envengineer.loop.lifecycle import design_info

        self._emit("on_design_end", f"design/{round}", round=round, design=design_info(self.dir, round, line, self.run.generator))
        if halt:
            raise FallbackLimitError(self._halt_message(streak, outcome.reason))

    def _halt_message(self, streak: list[int], reason: str) -> str:
        engineer = self.run.engineer.name
        model = self.run.engineer.model
        who = f"{engineer} (model {model})" if model else engineer
        rounds = f"round {streak[0]}" if len(streak) == 1 else f"rounds {streak[0]}–{streak[-1]}"
        return (
            f"engineer {who}: {len(streak)} consecutive design step(s) fell back ({rounds}), the limit set by "
            f"design.max_fallbacks; last reason: {reason}. The run stopped after recording round {streak[-1]}'s design. "
            f"Fix the cause (API key, model path, server) and rerun the same config: the run resumes and redoes round "
            f"{streak[-1]}'s design step. Setting design.max_fallbacks: null keeps going on the previous config instead."
        )

    # ----------------------------------------------------------------- run
    def run_all(self) -> list[dict[str, Any]]:
        self.start()
        try:
            self.pretrain()
            self.base_eval()
            for round in range(self.cfg.rounds):
                self.generate(round)
                self.train(round)
                self.eval(round)
                self.bench(round)
                self.design(round)
                if not self.dir.done(Step.ROUND_END, round):
                    self._emit("on_round_end", f"round/{round}", round=round, metrics=self.round_metrics(round))
                    self.dir.record(Step.ROUND_END, round, time.monotonic())
            table = self.table()
        except BaseException as exc:
            self._stopped(exc)
            raise
        from envengineer.loop.lifecycle import run_end

        self._emit("on_run_end", metrics=run_end(table, "finished", None))
        self.trackers.close()
        return table

    def _stopped(self, exc: BaseException) -> None:
        """``on_run_end`` for a run stopped by ``exc`` (``failed``, or ``interrupted`` by Ctrl-C): each hook's own
        error is logged, never raised over the run's."""
        import logging

        status = "failed" if isinstance(exc, Exception) else "interrupted"
        try:
            table = self.table()
        except Exception:  # noqa: BLE001 - the run's own error is what matters
            table = []
        try:
            from envengineer.loop.lifecycle import run_end

            self._emit("on_run_end", metrics=run_end(table, status, " ".join(str(exc).split()) or type(exc).__name__))
        except Exception as hook_error:  # noqa: BLE001
            logging.getLogger(__name__).warning("on_run_end raised %s: %s (after the run stopped on its own error)",
                                                type(hook_error).__name__, hook_error)
        self.trackers.close()

    def round_metrics(self, round: int) -> dict[str, Any]:
        """The payload of ``on_round_end`` (:func:`envengineer.loop.lifecycle.round_metrics`)."""
        from envengineer.loop.lifecycle import round_metrics

        validation = self.cfg.eval.validation
        return round_metrics(self.dir, round, self.run.generator, validation, self.registry.benchmark(validation))

    def table(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        base = self.dir.done(Step.BASE_EVAL)
        base_verdicts = read_verdicts(self.dir.eval_verdicts(None)) if base else None
        if base:
            rows.append({"round": "base", "n": base.get("n"), "valid_rate": base["valid_rate"], "optimal_rate": base["optimal_rate"], "engineer": "", "fallback": None,
                         **({"sampled_pass1": base["sampled_pass1"]} if "sampled_pass1" in base else {})})
        for round in range(self.cfg.rounds):
            line = self.dir.done(Step.EVAL, round)
            if not line:
                continue
            design = self.dir.done(Step.DESIGN, round) or {}
            row = {
                "round": round, "n": line.get("n"), "valid_rate": line["valid_rate"], "optimal_rate": line["optimal_rate"],
                "engineer": design.get("engineer", ""), "fallback": design.get("fallback"),
            }
            if "sampled_pass1" in line:
                row["sampled_pass1"] = line["sampled_pass1"]
            if design.get("fallback"):
                row["reason"] = design.get("reason") or ""
            if design.get("halted"):
                row["halted"] = True
            change = paired_with_base(read_verdicts(self.dir.eval_verdicts(round)), base_verdicts)
            if change:
                row["vs_base"] = change
            rows.append(row)
        return rows


def _tracker_names(entries: Any) -> list[str]:
    """The names of a run config's ``trackers`` entries (a name, or a mapping with a ``name``)."""
    names = []
    for entry in entries if isinstance(entries, list) else []:
        name = entry.get("name") if isinstance(entry, dict) else entry
        if isinstance(name, str):
            names.append(name)
    return names


def _sampled_field(summary: dict[str, Any]) -> dict[str, Any]:
    """``{"sampled_pass1": rate}`` for a history line when the evaluation sampled, else {}."""
    sampled = summary.get("sampled")
    if isinstance(sampled, dict) and isinstance(sampled.get("pass1"), (int, float)):
        return {"sampled_pass1": sampled["pass1"]}
    return {}


#: what a round trained on, copied from the trainer's metrics into details.json's bookkeeping when it reports it
_TRAINED_KEYS = ("trained_prompts", "prompts_used", "judged", "kept", "kept_target", "max_draws", "capped", "draws")


def _bookkeeping(trainer: Any, result: Any) -> dict[str, Any]:
    metrics = (result.metrics or {}) if result is not None else {}
    out = {"epochs": trainer.epochs, "steps": metrics.get("steps")}
    out.update({key: metrics[key] for key in _TRAINED_KEYS if isinstance(metrics.get(key), (int, float, bool))})
    return out


def print_table(rows: list[dict[str, Any]], console: Console, validation: str) -> None:
    table = Table(title=f"per-round results on {validation}", title_justify="left")
    columns = [("round", "left"), ("n", "right"), ("valid", "right"), ("± se", "right"), ("vs base", "right"),
               ("optimal", "right"), ("engineer", "left"), ("design", "left")]
    sampled = any("sampled_pass1" in row for row in rows)
    if sampled:
        columns.insert(5, ("sampled", "right"))
    for column, justify in columns:
        table.add_column(column, justify=justify, no_wrap=True)
    for row in rows:
        design = "" if row["fallback"] is None else ("fallback" if row["fallback"] else "applied")
        n = row.get("n")
        se = f"{100 * Rates.stderr(row['valid_rate'], n):.1f}" if n else ""
        change = row.get("vs_base")
        versus = f"+{change['gained']} −{change['lost']} p={change['p']:.3f}" if change else ""
        cells = [str(row["round"]), str(n or ""), f"{100 * row['valid_rate']:.1f}%", se, versus,
                 f"{100 * row['optimal_rate']:.1f}%", row["engineer"], design]
        if sampled:
            value = row.get("sampled_pass1")
            cells.insert(5, f"{100 * value:.1f}%" if isinstance(value, (int, float)) else "")
        table.add_row(*cells)
    console.print(table)
    if sampled:
        console.print("[dim]sampled: pass@1 of the answers sampled per instance at the trainer's temperature (eval.sampled); "
                      "valid: greedy answers[/]")
    if any(row.get("vs_base") for row in rows):
        console.print("[dim]vs base: instances solved that the base missed (+) and the reverse (−); "
                      "p: two-sided exact sign test[/]")
    designs = [(bool(row["fallback"]), row.get("reason", "")) for row in rows if row.get("fallback") is not None]
    alarm = design_alarm(designs, halted=any(row.get("halted") for row in rows))
    if alarm is not None:
        style = "bold white on red" if alarm.failed else "bold yellow"
        console.print(f"[{style}]{escape(alarm.headline)}[/]", highlight=False)
        console.print(escape(alarm.detail), highlight=False)


def check_inputs(resolved: ResolvedRun) -> None:
    """Before anything is written under the run's output: raise :class:`ConfigError` when the run's policy lacks
    what it does not make itself (:meth:`Policy.input_problem`: a missing or incomplete model folder, with the
    download command). A run past its pretrain step has its starting model recorded and is not asked again."""
    if RunDir(resolved.run_dir).done(Step.PRETRAIN):
        return
    problem = resolved.policy.input_problem()
    if problem:
        raise ConfigError("; ".join(problem))


def run(
    config_path: str | Path, *, registry: Registry | None = None, console: Console | None = None,
    output: str | None = None, overrides: list[str] | tuple[str, ...] = (), dry_run: bool = False,
) -> list[dict[str, Any]] | dict[str, Any]:
    """Run (or resume) the loop described by a run config file and dotted overrides; return the per-round table.

    ``dry_run``: only :meth:`Loop.plan` (the starting policy, round 0's set, the trainer's plan); return the plan.
    """
    from envengineer.registry import load_registry
    from envengineer.loop.runconfig import load_run_config, resolve

    registry = registry or load_registry()
    config = load_run_config(config_path, overrides, registry)
    if output:
        config = config.model_copy(update={"output": output})
    resolved = resolve(config, registry)
    check_inputs(resolved)
    loop = Loop(resolved, registry, console or Console())
    if dry_run:
        return loop.plan()
    from envengineer.loop.preflight import preflight, table as checks_table

    checks = preflight(registry.pm, [resolved.trainer, resolved.policy, resolved.engineer])  # stops a GPU run that cannot work
    if checks:
        loop.console.print(checks_table(checks, title="before the GPU rounds (envengineer doctor)"))
    try:
        rows = loop.run_all()
    except FallbackLimitError:
        print_table(loop.table(), loop.console, loop.cfg.eval.validation)  # what was done, under the banner
        raise
    print_table(rows, loop.console, loop.cfg.eval.validation)
    return rows
