"""The engineer benchmark: an engineer's proposals scored for a recorded round's checkpoint, without training
(``envengineer engineers score``).

For every recorded round of a run (a round with a checkpoint and its evidence) each engineer is asked for
``proposals`` proposals on that round's own evidence, through the request the loop's design step builds
(:func:`envengineer.loop.replay.offline_request`) and the loop's design step (:func:`envengineer.design.step.design`:
parse, re-ask, project, fall back). Each resulting config is scored for the round's checkpoint: ``instances``
fresh training instances drawn from it by the task's generator, each answered ``draws`` times by the checkpoint
at the trainer's sampling temperature (the policy's own sampling path, :meth:`Policy.sampling` and
:meth:`Policy.sample_records`, as evaluation's sampled pass@1 uses it), each answer scored by the task's
validator. The round's config unchanged (the ``fixed`` environment) is always scored as the reference.

Every config of a round draws its instances with the same seed (common random numbers): the same config gives
the same instances, so a proposal equal to the current config scores exactly as ``fixed``, and two proposals
differ by their configs, not by the luck of the draw. Samples are cached per instance (:class:`SampleCache`:
the checkpoint's files, the instance's content, the sampling settings and ``draws``), so proposals that share
instances, and a second scoring, cost nothing twice. Every budget is a count of work (proposals, instances,
samples), never a time.

The figures of one config are in :mod:`~envengineer.plugins.engineer_bench.statistics`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError, InputError
from envengineer.plugins.engineer_bench.predictions import predict_round, summarize_predictions
from envengineer.plugins.engineer_bench.recorded import (RECORDED, REFERENCE, RecordedRun, ScoreSettings, arm_name, derived_seed,
                                                         engineer_specs, load_recorded_run, next_gain, next_mixed)
from envengineer.plugins.engineer_bench.statistics import config_figures, predictive_check, summarize

# --------------------------------------------------------------------------------------------- the cache


def checkpoint_identity(folder: str | Path) -> str:
    """sha256 over the files of a checkpoint folder (path relative to it, then the content's sha256)."""
    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"{root}: no such checkpoint folder")
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        inner = hashlib.sha256()
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                inner.update(chunk)
        digest.update(f"{path.relative_to(root).as_posix()}\0".encode())
        digest.update(inner.digest())
    return digest.hexdigest()


def instance_key(record: Mapping[str, Any]) -> str:
    """The instance's content: sha256 of its record as canonical JSON (two configs may reuse an id)."""
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str, separators=(",", ":")).encode()).hexdigest()


class SampleCache:
    """One small JSON file per (checkpoint, instance, sampling settings, draws): the validity of each answer.

    ``drawn`` counts the samples drawn fresh by this process, ``hits`` the instances read back."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.drawn = 0
        self.sampled_instances = 0
        self.hits = 0

    @staticmethod
    def key(checkpoint: str, instance: str, settings: Mapping[str, Any], draws: int) -> str:
        text = json.dumps({"checkpoint": checkpoint, "instance": instance, "settings": settings, "draws": draws}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> list[bool] | None:
        path = self._path(key)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except ValueError:
            return None  # a damaged entry is drawn again (and rewritten)
        valid = data.get("valid") if isinstance(data, dict) else None
        if not isinstance(valid, list) or not all(isinstance(v, bool) for v in valid):
            return None
        self.hits += 1
        return valid

    def put(self, key: str, valid: Sequence[bool]) -> None:
        from envengineer.fileio import write_json

        write_json(self._path(key), {"valid": [bool(v) for v in valid]})
        self.drawn += len(valid)
        self.sampled_instances += 1


# --------------------------------------------------------------------------------------------- scoring


class RoundScorer:
    """Scores configs for one round's checkpoint: its sampler, its checkpoint identity, the round's draw seed."""

    def __init__(self, run: RecordedRun, round: int, settings: ScoreSettings, cache: SampleCache, tag: str = "engineer-score") -> None:
        """``tag`` names the draws: the benchmark's are ``engineer-score``; a scorer with another tag (the critic's)
        draws other instances and samples, so what it chose is scored by the benchmark out of sample."""
        from envengineer.store.rundir import RunDir

        self.run, self.round, self.settings, self.cache = run, round, settings, cache
        checkpoint = RunDir(run.path).checkpoint(round)
        self.identity = checkpoint_identity(checkpoint)
        temperature = run.temperature
        self.sample_seed = derived_seed(tag, "sample", settings.seed, run.seed, round)
        sampler = run.policy.with_path(checkpoint).sampling(temperature=temperature, seed=self.sample_seed)
        if sampler is None:
            raise ConfigError(f"{run.path}: policy {run.policy.name} cannot sample at the trainer's temperature ({temperature})")
        self.sampler = sampler
        self.style = run.policy.prompt_style
        described = {k: v for k, v in dict(sampler.describe()).items() if k != "path"}
        self.settings_key = {"policy": described, "temperature": temperature, "style": self.style,
                             "task": run.generator.options.model_dump(mode="json")}
        # every config of the round draws with this seed: the same config gives the same instances
        self.draw_seed = derived_seed(tag, "draw", settings.seed, run.seed, round)
        self.group_size = run.group_size or settings.draws

    def close(self) -> None:
        self.sampler.close()

    def score(self, config: Any) -> dict[str, Any]:
        from envengineer.loop.evaluation import score_response

        run, s = self.run, self.settings
        records = run.generator.generate(config, n=s.instances, seed=self.draw_seed).records
        keys = [SampleCache.key(self.identity, instance_key(r), self.settings_key, s.draws) for r in records]
        valid: list[list[bool] | None] = [self.cache.get(k) for k in keys]
        missing = [i for i, v in enumerate(valid) if v is None or len(v) != s.draws]
        batch_size = self.sampler.sample_batch_size or 64
        for start in range(0, len(missing), batch_size):
            batch = missing[start : start + batch_size]
            answers = self.sampler.sample_records(run.generator, [records[i] for i in batch], style=self.style, n=s.draws)
            for i, texts in zip(batch, answers):
                judged = [bool(score_response(run.validator, run.generator, records[i], text, self.style).valid) for text in texts]
                if len(judged) != s.draws:
                    raise ConfigError(f"policy {run.policy.name}: asked for {s.draws} samples, got {len(judged)}")
                self.cache.put(keys[i], judged)
                valid[i] = judged
        return config_figures(records, [v or [] for v in valid], run.generator, group_size=self.group_size, budget=run.budget)


def _plain_config(config: Any) -> Any:
    return config.model_dump(mode="json") if hasattr(config, "model_dump") else config


def call_cost(calls: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What an LLM engineer's calls in one design step cost: each usage field summed over every call (re-asks and
    failed calls included) and their seconds. Tokens do not depend on the machine's load, so they compare engineers
    measured on a busy machine; the seconds do not."""
    if not calls:
        return {}
    usage: dict[str, int] = {}
    for call in calls:
        for key, value in (call.get("usage") or {}).items():
            if isinstance(value, int):
                usage[key] = usage.get(key, 0) + value
    return {"usage": usage, "latency_s": round(sum(float(c.get("latency_s") or 0.0) for c in calls), 3)}


def with_context(config: Mapping[str, Any], context: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A run's config with ``context`` laid over its ``context`` section, mapping into mapping (``{"F": {"donor": ...}}``
    changes that one option of F); the run's own when None."""
    def lay(own: Any, over: Any) -> Any:
        if not (isinstance(own, Mapping) and isinstance(over, Mapping)):
            return over
        return {**own, **{key: lay(own.get(key), value) for key, value in over.items()}}

    return {**config, "context": lay(config.get("context") or {}, context)} if context else config


def score_runs(registry: Any, run_dirs: Sequence[str | Path], engineers: Sequence[str], settings: ScoreSettings,
               cache_dir: str | Path, *, recorded: bool = False, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Score every engineer's proposals on every recorded round of ``run_dirs``; the result holds one line per
    scored config (``lines``, the reference included), the per-engineer summary and the cost.

    ``recorded``: also score, as engineer ``recorded``, the config each run actually trained on in the next round
    (its own engineer's design), with the next round's measured gain beside it (:func:`next_gain`), and report the
    rank correlation of the two (:func:`predictive_check`): does the score predict what training then did?"""
    from envengineer.api import config_moves
    from envengineer.design.step import design
    from envengineer.loop.replay import offline_request
    from envengineer.store.rundir import RunDir

    if settings.proposals < 1 or settings.instances < 1 or settings.draws < 1:
        raise ConfigError("engineers score: --samples, --instances and --draws must be at least 1")
    if not engineers and not recorded:
        raise ConfigError("engineers score: give at least one --engineer NAME (or --recorded)")
    specs = engineer_specs(registry, engineers) if engineers else []
    runs = [load_recorded_run(registry, path) for path in run_dirs]  # every folder checked before any work
    cache = SampleCache(cache_dir)
    started_wall, started_cpu = time.monotonic(), time.process_time()
    lines: list[dict[str, Any]] = []
    predictions: list[dict[str, Any]] = []
    if settings.predictions < 0:
        raise ConfigError("engineers score: --predict must be 0 or more")
    for run in runs:
        for number in run.rounds:
            scorer = RoundScorer(run, number, settings, cache)
            where = {"run": str(run.path), "run_seed": run.seed, "round": number}
            try:
                from envengineer.store.configs import load_generator_config

                current = load_generator_config(run.generator, RunDir(run.path).config_path(number), check_bounds=False)
                if progress:
                    progress(f"{run.path.name} round {number}: the fixed reference")
                reference = scorer.score(current)
                lines.append({**where, "engineer": REFERENCE, "proposal": 0, "fallback": False, "reason": "",
                              "config": _plain_config(current), **reference})
                following = RunDir(run.path).config_path(number + 1)
                if recorded and following.is_file() and (gain := next_gain(run, number)) is not None:
                    if progress:
                        progress(f"{run.path.name} round {number}: the config it trained on next")
                    chosen = load_generator_config(run.generator, following, check_bounds=False)
                    figures = scorer.score(chosen)
                    lines.append({**where, "engineer": RECORDED, "proposal": 0, "fallback": False, "reason": "", "config": _plain_config(chosen),
                                  **figures, "vs_fixed": {k: round(figures[k] - reference[k], 6) for k in ("kept_per_budget", "learnability", "mixed")},
                                  "next_gain": gain, "next_mixed": next_mixed(run, number), "arm": arm_name(run)})
                for spec in specs:
                    instance = registry.create("engineer", spec.name, spec.options, where=f"engineer.{spec.name}")
                    request = offline_request(registry, run.path, number, instance, with_context(run.config, settings.context))
                    if settings.predictions:
                        if progress:
                            progress(f"{run.path.name} round {number}: {spec.label} predicts its success per group")
                        predictions += predict_round(instance, request, reference, settings, run.temperature, where, spec.label)
                    for index in range(settings.proposals):
                        # proposal 0 is the loop's own request; the others differ only in their seed
                        asked = request if index == 0 else replace(request, seed=derived_seed("engineer-score", "proposal", request.seed, index))
                        if progress:
                            progress(f"{run.path.name} round {number}: {spec.label} proposal {index + 1}/{settings.proposals}")
                        outcome = design(instance, asked, reask=run.reask, summarize=False)
                        figures = scorer.score(outcome.config)
                        lines.append({
                            **where, "engineer": spec.label, "proposal": index, "fallback": bool(outcome.fallback), "reason": outcome.reason,
                            "changes": len(outcome.projection.changes) if outcome.projection is not None else 0,
                            "config": _plain_config(outcome.config),
                            # per group, what the proposal moved in the decisions interface's words (a copy of one word shows)
                            "moves": config_moves(run.generator, current, outcome.config), **figures,
                            "vs_fixed": {k: round(figures[k] - reference[k], 6) for k in ("kept_per_budget", "learnability", "mixed")},
                            **(call_cost(outcome.calls) if instance.uses_llm else {}),
                        })
            finally:
                scorer.close()
    cost = {"wall_s": round(time.monotonic() - started_wall, 3), "cpu_s": round(time.process_time() - started_cpu, 3),
            "samples_drawn": cache.drawn, "instances_sampled": cache.sampled_instances, "instances_from_cache": cache.hits}
    return {
        "settings": {"proposals": settings.proposals, "instances": settings.instances, "draws": settings.draws, "seed": settings.seed,
                     "predictions": settings.predictions, "cache": str(cache_dir), **({"context": settings.context} if settings.context else {})},
        "runs": [{"path": str(r.path), "seed": r.seed, "rounds": r.rounds, "budget": r.budget, "temperature": r.temperature,
                  "group_size": r.group_size or settings.draws} for r in runs],
        "engineers": (labels := [REFERENCE, *([RECORDED] if recorded else []), *(s.label for s in specs)]),
        "summary": summarize(lines, labels, seed=settings.seed),
        **({"predictive": predictive_check(lines)} if recorded else {}),
        **({"self_prediction": summarize_predictions(predictions, seed=settings.seed), "predictions": predictions} if settings.predictions else {}),
        "cost": cost,
        "lines": lines,
    }
