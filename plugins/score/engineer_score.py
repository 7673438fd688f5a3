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

The figures of one config, from ``k`` valid answers of ``S = draws`` per instance and the number ``G`` of answers
that decide whether the trainer keeps a prompt (its prefilter's ``prefilter_samples`` when it screens, else its
GRPO group ``num_generations``; ``S`` when it declares neither: :attr:`RecordedRun.group_size`):

- ``mixed``: the chance that ``G`` answers are mixed (some right, some wrong: a prompt the prefilter keeps, a
  group GRPO learns from), ``1 - C(k, G)/C(S, G) - C(S - k, G)/C(S, G)``, unbiased for
  ``1 - p^G - (1 - p)^G`` when ``S >= G`` (a plug-in of ``p = k/S`` otherwise); ``all_right`` and ``all_wrong``
  are the two other terms; the three shares sum to 1;
- ``kept_per_budget``: ``budget`` (the run's instances per round) times the mean ``mixed``: the prompts a
  round of this config would give GRPO;
- ``learnability``: the mean over instances of ``k (S - k) / (S (S - 1))``, unbiased for ``p (1 - p)``;
- ``success``: the mean ``k / S``; ``by_group``: per group of the task's primary grouping, its share of the
  instances (the budget), success and mixed share.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError, InputError

#: the figures of one scored config that the tables and the plot compare (higher is better for the first two)
FIGURES = ("kept_per_budget", "learnability", "mixed", "all_right", "all_wrong", "success")
#: the figure the plot and the validation use
PRIMARY = "kept_per_budget"
REFERENCE = "reference"  # the round's config unchanged: the fixed environment
RECORDED = "recorded"  # the config the run trained on next (``--recorded``)


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


# --------------------------------------------------------------------------------------------- the figures


def _choose(n: int, k: int) -> int:
    return math.comb(n, k) if 0 <= k <= n else 0


def instance_figures(k: int, s: int, group: int) -> dict[str, float]:
    """mixed / all_right / all_wrong chances of a GRPO group of ``group`` answers, and p(1-p), from ``k`` of ``s``."""
    p = k / s
    if s >= group:
        total = _choose(s, group)
        right, wrong = _choose(k, group) / total, _choose(s - k, group) / total
    else:  # too few draws for the unbiased estimate: plug in p
        right, wrong = p**group, (1 - p) ** group
    learn = k * (s - k) / (s * (s - 1)) if s > 1 else p * (1 - p)
    return {"mixed": 1 - right - wrong, "all_right": right, "all_wrong": wrong, "learnability": learn, "success": p}


def config_figures(records: Sequence[Mapping[str, Any]], valid: Sequence[Sequence[bool]], generator: Any, *, group_size: int,
                   budget: int) -> dict[str, Any]:
    """The figures of one scored config (module docstring) from its instances and their answers' validity."""
    if not records:
        raise ConfigError("engineers score: the generator gave no instances for a config")
    per = [instance_figures(sum(v), len(v), group_size) for v in valid]
    n = len(per)
    out: dict[str, Any] = {key: sum(f[key] for f in per) / n for key in ("mixed", "all_right", "all_wrong", "learnability", "success")}
    out["kept_per_budget"] = budget * out["mixed"]
    order = {g: i for i, g in enumerate(generator.groups())}
    by: dict[str, list[dict[str, float]]] = {}
    for record, figures in zip(records, per):
        by.setdefault(str(generator.group(record)), []).append(figures)
    out["by_group"] = {
        g: {"share": len(cells) / n, "success": sum(c["success"] for c in cells) / len(cells),
            "mixed": sum(c["mixed"] for c in cells) / len(cells)}
        for g, cells in sorted(by.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))
    }
    out["instances"] = n
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in out.items()}


# --------------------------------------------------------------------------------------------- a recorded run


def derived_seed(*parts: Any) -> int:
    """A seed from ``parts``, the same on every machine."""
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:4], "big") & 0x7FFFFFFF


@dataclass
class ScoreSettings:
    proposals: int = 4  # K: proposals asked of each engineer per round
    instances: int = 64  # M: fresh instances drawn per config
    draws: int = 8  # S: answers sampled per instance
    seed: int = 0
    predictions: int = 0  # self-predictions asked of each engineer with a model per round (0: none)


@dataclass
class RecordedRun:
    """What scoring needs of a run directory: its task, policy, trainer and the rounds it recorded."""

    path: Path
    config: dict[str, Any]
    generator: Any
    validator: Any
    policy: Any
    trainer: Any
    rounds: list[int]

    @property
    def seed(self) -> int:
        return int(self.config.get("seed") or 0)

    @property
    def budget(self) -> int:
        return int(self.config.get("budget") or 0)

    @property
    def temperature(self) -> float:
        value = self.trainer.sampling_temperature
        if value is None:
            raise ConfigError(f"{self.path}: trainer {self.trainer.name} does not say its sampling temperature; "
                              "the engineer benchmark samples the checkpoint at it")
        return float(value)

    @property
    def group_size(self) -> int | None:
        """The answers that decide whether a prompt is kept: the trainer's screen (``prefilter_samples``, or in
        ``kept_prompts`` mode the GRPO group) when it screens, else its GRPO group (``num_generations``: a prompt
        whose group is all right or all wrong gives no gradient); None when the trainer declares neither."""
        from envengineer.components.training import screening_samples

        options = getattr(self.trainer, "options", None)
        group = getattr(options, "num_generations", None)
        prefilter = getattr(options, "prefilter_samples", 0)
        if not isinstance(group, int) or group < 2:
            return None
        screen = screening_samples(prefilter if isinstance(prefilter, int) else 0, group, str(self.config.get("budget_mode") or "instances"))
        return screen if screen >= 2 else group

    @property
    def reask(self) -> int:
        design = self.config.get("design")
        value = design.get("reask") if isinstance(design, dict) else None
        return int(value) if isinstance(value, int) else 1


def load_run(registry: Any, path: str | Path) -> RecordedRun:
    """A recorded run; an error naming the folder when it has no round with a checkpoint and evidence."""
    from envengineer.design.evidence import task_from_run
    from envengineer.fileio import read_yaml
    from envengineer.store.rundir import RunDir, Step

    folder = Path(path)
    records = RunDir(folder)
    if not records.run_yaml.is_file():
        raise InputError(f"{folder}: not a run directory (no run.yaml)")
    config = read_yaml(records.run_yaml)
    if not isinstance(config, dict):
        raise InputError(f"{records.run_yaml}: expected a mapping")
    generator = task_from_run(config, registry)
    validator = registry.validator_for(generator)
    sections = {}
    for kind in ("policy", "trainer"):
        section = config.get(kind)
        if not isinstance(section, dict) or not section.get("name"):
            raise InputError(f"{records.run_yaml}: no {kind} section")
        options = {k: v for k, v in section.items() if k != "name"}
        sections[kind] = registry.create(kind, section["name"], options, where=f"{kind}.{section['name']}")
    rounds = [n for n in records.rounds_on_disk()
              if records.done(Step.TRAIN, n) and records.checkpoint(n).is_dir() and records.eval_summary(n).is_file()
              and records.config_path(n).is_file()]
    if not rounds:
        raise InputError(f"{folder}: no recorded round with a checkpoint and evidence (a round needs its train step in "
                         "history.jsonl, its train/checkpoint folder, eval/summary.json and config.yaml)")
    return RecordedRun(folder, config, generator, validator, sections["policy"], sections["trainer"], rounds)


@dataclass
class EngineerSpec:
    """An engineer to score: a registered name, or a YAML file holding an engineer section (``propose --engineer-config``)."""

    label: str
    name: str
    options: dict[str, Any] = field(default_factory=dict)


def engineer_specs(registry: Any, given: Sequence[str]) -> list[EngineerSpec]:
    """``--engineer`` values: each a registered engineer's name or an options file; unknown ones are errors naming them."""
    from envengineer.loop.replay import engineer_section

    specs: list[EngineerSpec] = []
    for value in given:
        path = Path(value)
        if value.endswith((".yaml", ".yml")) and path.is_file():
            name, options = engineer_section({}, None, path)
            registry.get("engineer", name)
            label = path.stem
        else:
            registry.get("engineer", value)  # UnknownComponentError naming it and the registered ones
            name, options, label = value, {}, value
        registry.create("engineer", name, options, where=f"engineer.{name}")  # bad options fail before any work
        if label in {s.label for s in specs} or label in (REFERENCE, RECORDED):
            raise ConfigError(f"--engineer {value}: given twice")
        specs.append(EngineerSpec(label, name, dict(options)))
    return specs


# --------------------------------------------------------------------------------------------- self-prediction

PREDICT_INSTRUCTION = (
    "Before you design anything, predict how the current policy will do. For each group listed below, give the share "
    "of its answers that will be right when the policy samples {draws} answers per fresh training instance of the "
    "current config, at the training temperature {temperature}: a number from 0 (never right) to 1 (always right). "
    "Groups: {groups}. Reply with one JSON object mapping every group to its number, in a fenced block:\n\n"
    "```yaml\n{example}\n```"
)


def prediction_schema(groups: Sequence[str]) -> dict[str, Any]:
    """The self-prediction's JSON schema: every group, a number in [0, 1] (closed, every group required)."""
    return {"type": "object", "properties": {g: {"type": "number", "minimum": 0, "maximum": 1} for g in groups},
            "required": list(groups), "additionalProperties": False}


def prediction_messages(messages: Sequence[Mapping[str, str]], groups: Sequence[str], *, draws: int, temperature: float) -> list[dict[str, str]]:
    """The design request's conversation with the self-prediction's question appended to its last user turn."""
    from envengineer.design.structured import with_instruction

    # the format without numbers: an example's values are copied by a small model (17 of 24 SmolLM2 predictions were)
    example = "{" + ", ".join(f'"{g}": <number>' for g in groups[:2]) + (", ..." if len(groups) > 2 else "") + "}"
    return with_instruction(messages, PREDICT_INSTRUCTION.format(draws=draws, temperature=temperature, groups=", ".join(groups), example=example))


def parse_prediction(text: str, groups: Sequence[str]) -> tuple[dict[str, float] | None, str]:
    """The per-group numbers of a self-prediction reply (its last fenced block, else the whole text, as JSON or YAML),
    or None and why: every group must be there with a number in [0, 1] (untrusted input: nothing else is read)."""
    from envengineer.design.proposals import UnusableProposal, extract_yaml_block, parse_proposal

    if not isinstance(text, str) or not text.strip():
        return None, "empty reply"
    try:
        block = extract_yaml_block(text)
    except UnusableProposal:  # no fenced block: the whole reply (an API's JSON answer)
        block = text
    try:
        data = parse_proposal(block)  # the design step's strict loader and size limit
    except UnusableProposal as exc:
        return None, str(exc)
    missing = [g for g in groups if g not in data]
    if missing:
        return None, f"no number for {', '.join(missing[:5])}"
    out = {}
    for g in groups:
        value = data[g]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= float(value) <= 1 or value != value:
            return None, f"{g}: {value!r} is not a number in [0, 1]"
        out[g] = float(value)
    return out, ""


def brier(predicted: Mapping[str, float], measured: Mapping[str, float]) -> float:
    """Mean squared difference over the groups measured."""
    groups = [g for g in measured if g in predicted]
    return sum((predicted[g] - measured[g]) ** 2 for g in groups) / len(groups)


def predict_round(instance: Any, request: Any, reference: Mapping[str, Any], settings: ScoreSettings, temperature: float,
                  where: Mapping[str, Any], label: str) -> list[dict[str, Any]]:
    """``settings.predictions`` self-predictions of one engineer on one round, each scored by Brier against the
    reference's measured success per group (the round's checkpoint sampled ``draws`` times per fresh instance of the
    round's config at the trainer's temperature); beside it the Brier of two engineers with no self-knowledge: 0.5
    everywhere, and a copy of the round's evidence (the training signal's success per group, where it has the group)."""
    from envengineer.loop.signal import group_success

    measured = {g: float(cell["success"]) for g, cell in reference["by_group"].items()}
    groups = list(measured)
    evidence = {g: float(cell["success"]) for g, cell in group_success(request.evidence.signal).items()
                if g in measured and isinstance(cell, Mapping) and cell.get("success") is not None}
    messages = prediction_messages(request.messages, groups, draws=settings.draws, temperature=temperature)
    schema = prediction_schema(groups)
    out = []
    for index in range(settings.predictions):
        asked = request if index == 0 else replace(request, seed=derived_seed("engineer-score", "prediction", request.seed, index))
        line: dict[str, Any] = {**where, "engineer": label, "prediction": index, "measured": measured,
                                "instances": {g: round(cell["share"] * reference["instances"]) for g, cell in reference["by_group"].items()},
                                "brier_half": round(brier({g: 0.5 for g in groups}, measured), 6),
                                "brier_evidence": round(brier(evidence, {g: measured[g] for g in evidence}), 6) if evidence else None}
        try:
            reply = instance.ask(asked, messages, schema)
        except Exception as exc:  # noqa: BLE001 - an engineer call that fails is recorded, not fatal
            reply, line["error"] = None, f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        if reply is None and "error" not in line:
            return []  # an engineer without a model: nothing to ask
        predicted, problem = parse_prediction(getattr(reply, "text", "") or "", groups) if reply is not None else (None, line["error"])
        line.update(predicted=predicted, problem=problem or None, reply=(getattr(reply, "text", "") or "")[:2000] if reply is not None else None,
                    brier=round(brier(predicted, measured), 6) if predicted else None)
        if predicted and evidence:
            line["brier_evidence_same_groups"] = round(brier({g: predicted[g] for g in evidence}, {g: measured[g] for g in evidence}), 6)
        out.append(line)
    return out


def summarize_predictions(lines: Sequence[Mapping[str, Any]], *, seed: int = 0) -> dict[str, Any]:
    """Per engineer: predictions asked, usable, the mean Brier (cluster-bootstrap interval over rounds) and the
    no-knowledge references' mean Brier on the same rounds."""
    out: dict[str, Any] = {}
    for engineer in dict.fromkeys(l["engineer"] for l in lines):
        mine = [l for l in lines if l["engineer"] == engineer]
        usable = [l for l in mine if l.get("brier") is not None]
        rounds: dict[tuple[str, int], list[float]] = {}
        for line in usable:
            rounds.setdefault((line["run"], line["round"]), []).append(float(line["brier"]))
        interval = cluster_bootstrap(list(rounds.values()), seed=seed) if rounds else None
        evidence = [float(l["brier_evidence"]) for l in mine if l.get("brier_evidence") is not None]
        out[engineer] = {
            "asked": len(mine), "usable": len(usable),
            "brier": {"mean": round(sum(float(l["brier"]) for l in usable) / len(usable), 6) if usable else None,
                      "ci95": None if interval is None else [round(x, 6) for x in interval]},
            "brier_half": round(sum(float(l["brier_half"]) for l in mine) / len(mine), 6),
            "brier_evidence": round(sum(evidence) / len(evidence), 6) if evidence else None,
            "distinct": len({json.dumps(l["predicted"], sort_keys=True) for l in usable}),
            "problems": sorted({str(l["problem"]) for l in mine if l.get("problem")})[:5],
        }
    return out


# --------------------------------------------------------------------------------------------- scoring


class RoundScorer:
    """Scores configs for one round's checkpoint: its sampler, its checkpoint identity, the round's draw seed."""

    def __init__(self, run: RecordedRun, round: int, settings: ScoreSettings, cache: SampleCache) -> None:
        from envengineer.store.rundir import RunDir

        self.run, self.round, self.settings, self.cache = run, round, settings, cache
        checkpoint = RunDir(run.path).checkpoint(round)
        self.identity = checkpoint_identity(checkpoint)
        temperature = run.temperature
        self.sample_seed = derived_seed("engineer-score", "sample", settings.seed, run.seed, round)
        sampler = run.policy.with_path(checkpoint).sampling(temperature=temperature, seed=self.sample_seed)
        if sampler is None:
            raise ConfigError(f"{run.path}: policy {run.policy.name} cannot sample at the trainer's temperature ({temperature})")
        self.sampler = sampler
        self.style = run.policy.prompt_style
        described = {k: v for k, v in dict(sampler.describe()).items() if k != "path"}
        self.settings_key = {"policy": described, "temperature": temperature, "style": self.style,
                             "task": run.generator.options.model_dump(mode="json")}
        # every config of the round draws with this seed: the same config gives the same instances
        self.draw_seed = derived_seed("engineer-score", "draw", settings.seed, run.seed, round)
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


def score_runs(registry: Any, run_dirs: Sequence[str | Path], engineers: Sequence[str], settings: ScoreSettings,
               cache_dir: str | Path, *, recorded: bool = False, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Score every engineer's proposals on every recorded round of ``run_dirs``; the result holds one line per
    scored config (``lines``, the reference included), the per-engineer summary and the cost.

    ``recorded``: also score, as engineer ``recorded``, the config each run actually trained on in the next round
    (its own engineer's design), with the next round's measured gain beside it (:func:`next_gain`), and report the
    rank correlation of the two (:func:`predictive_check`): does the score predict what training then did?"""
    from envengineer.design.step import design
    from envengineer.loop.replay import offline_request
    from envengineer.store.rundir import RunDir

    if settings.proposals < 1 or settings.instances < 1 or settings.draws < 1:
        raise ConfigError("engineers score: --samples, --instances and --draws must be at least 1")
    if not engineers and not recorded:
        raise ConfigError("engineers score: give at least one --engineer NAME (or --recorded)")
    specs = engineer_specs(registry, engineers) if engineers else []
    runs = [load_run(registry, path) for path in run_dirs]  # every folder checked before any work
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
                                  "next_gain": gain, "next_mixed": next_mixed(run, number), "arm": _arm(run)})
                for spec in specs:
                    instance = registry.create("engineer", spec.name, spec.options, where=f"engineer.{spec.name}")
                    request = offline_request(registry, run.path, number, instance, run.config)
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
                            "config": _plain_config(outcome.config), **figures,
                            "vs_fixed": {k: round(figures[k] - reference[k], 6) for k in ("kept_per_budget", "learnability", "mixed")},
                        })
            finally:
                scorer.close()
    cost = {"wall_s": round(time.monotonic() - started_wall, 3), "cpu_s": round(time.process_time() - started_cpu, 3),
            "samples_drawn": cache.drawn, "instances_sampled": cache.sampled_instances, "instances_from_cache": cache.hits}
    return {
        "settings": {"proposals": settings.proposals, "instances": settings.instances, "draws": settings.draws, "seed": settings.seed,
                     "predictions": settings.predictions, "cache": str(cache_dir)},
        "runs": [{"path": str(r.path), "seed": r.seed, "rounds": r.rounds, "budget": r.budget, "temperature": r.temperature,
                  "group_size": r.group_size or settings.draws} for r in runs],
        "engineers": (labels := [REFERENCE, *([RECORDED] if recorded else []), *(s.label for s in specs)]),
        "summary": summarize(lines, labels, seed=settings.seed),
        **({"predictive": predictive_check(lines)} if recorded else {}),
        **({"self_prediction": summarize_predictions(predictions, seed=settings.seed), "predictions": predictions} if settings.predictions else {}),
        "cost": cost,
        "lines": lines,
    }


# --------------------------------------------------------------------------------------------- does it predict?


def _rate(summary_path: Path, *keys: str) -> float | None:
    try:
        data = json.loads(summary_path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return float(data) if isinstance(data, (int, float)) and not isinstance(data, bool) else None


def next_gain(run: RecordedRun, number: int) -> dict[str, float] | None:
    """What round ``number + 1`` (trained on the config the run chose after ``number``) gained over round ``number``:
    the validation set's greedy valid rate (``validation``), its sampled pass@1 where recorded (``sampled``), and
    each benchmark evaluated after both rounds (``bench/NAME``: the held-out target); None before it was evaluated."""
    from envengineer.store.rundir import RunDir

    records = RunDir(run.path)
    now, then = records.eval_summary(number), records.eval_summary(number + 1)
    before, after = _rate(now, "overall", "valid_rate"), _rate(then, "overall", "valid_rate")
    if before is None or after is None:
        return None
    gain = {"validation": round(after - before, 6)}
    sampled = (_rate(now, "sampled", "pass1"), _rate(then, "sampled", "pass1"))
    if None not in sampled:
        gain["sampled"] = round(sampled[1] - sampled[0], 6)  # type: ignore[operator]
    for name in sorted(set(records.bench_names(number)) & set(records.bench_names(number + 1))):
        pair = (_rate(records.bench_dir(number, name) / "summary.json", "overall", "valid_rate"),
                _rate(records.bench_dir(number + 1, name) / "summary.json", "overall", "valid_rate"))
        if None not in pair:
            gain[f"bench/{name}"] = round(pair[1] - pair[0], 6)  # type: ignore[operator]
    return gain


def next_mixed(run: RecordedRun, number: int) -> int | None:
    """The prompts of round ``number + 1`` whose answers were mixed, as its trainer recorded them (``signal.json``): the
    same checkpoint (``number``'s) on the same config as the recorded score, on the round's own instances, so the
    score's expected kept prompts per budget can be checked against what the trainer then found. None without a
    signal, or where the trainer's samples per prompt are not the score's G (``kept_prompts`` mode draws on)."""
    from envengineer.design.evidence import load_signal
    from envengineer.store.rundir import RunDir

    if str(run.config.get("budget_mode") or "instances") != "instances":
        return None
    overall = load_signal(RunDir(run.path), number + 1).get("overall") or {}
    value = overall.get("mixed")
    return int(value) if isinstance(value, int) and overall.get("prompts") == run.budget else None


def _arm(run: RecordedRun) -> str:
    engineer = run.config.get("engineer")
    return str(engineer.get("name")) if isinstance(engineer, dict) else str(engineer)


def spearman(x: Sequence[float], y: Sequence[float]) -> dict[str, Any]:
    """Spearman's rank correlation (ties share their mean rank) with its two-sided p (t approximation, n − 2
    degrees of freedom): scipy.stats.spearmanr; rho and p None under 3 points or when either side is constant."""
    n = len(x)
    if n < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return {"n": n, "rho": None, "p": None}
    from scipy import stats

    result = stats.spearmanr(x, y)
    rho, p = float(result.statistic), float(result.pvalue)
    return {"n": n, "rho": round(rho, 6), "p": float(f"{0.0 if abs(rho) >= 1 else p:.3g}")}


def predictive_check(lines: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Across arms and rounds: the rank correlation of the score of the config each run trained on next (its
    expected kept prompts, and minus the round's reference) with the gain training on it then measured."""
    recorded = [l for l in lines if l["engineer"] == RECORDED and l.get("next_gain")]
    measures = sorted({key for l in recorded for key in l["next_gain"]})
    out: dict[str, Any] = {}
    for score_key in ("kept_per_budget", "vs_fixed_kept_per_budget", "learnability"):
        for measure in measures:
            pairs = [(float(l["vs_fixed"]["kept_per_budget"] if score_key == "vs_fixed_kept_per_budget" else l[score_key]),
                      float(l["next_gain"][measure])) for l in recorded if measure in l["next_gain"]]
            out[f"{score_key} ~ {measure}"] = spearman([a for a, _ in pairs], [b for _, b in pairs])
    calibrated = [(float(l["kept_per_budget"]), float(l["next_mixed"])) for l in recorded if l.get("next_mixed") is not None]
    if calibrated:
        predicted, measured = [a for a, _ in calibrated], [b for _, b in calibrated]
        out["kept_per_budget ~ mixed prompts the trainer found next"] = {
            **spearman(predicted, measured), "mean_predicted": round(sum(predicted) / len(predicted), 3),
            "mean_measured": round(sum(measured) / len(measured), 3),
            "mean_abs_error": round(sum(abs(a - b) for a, b in calibrated) / len(calibrated), 3)}
    return out


# --------------------------------------------------------------------------------------------- the summary


def cluster_bootstrap(clusters: Sequence[Sequence[float]], *, resamples: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """A 95% percentile interval of the mean over all values, resampling whole clusters (a round's proposals share its
    instances and checkpoint, so they are not independent); None with fewer than two clusters."""
    clusters = [list(c) for c in clusters if c]
    if len(clusters) < 2:
        return None
    rng = random.Random(seed)
    means = []
    for _ in range(resamples):
        picked = [clusters[rng.randrange(len(clusters))] for _ in clusters]
        values = [v for c in picked for v in c]
        means.append(sum(values) / len(values))
    means.sort()
    return means[int(0.025 * resamples)], means[min(resamples - 1, int(0.975 * resamples))]


def summarize(lines: Sequence[Mapping[str, Any]], engineers: Sequence[str], *, seed: int = 0) -> dict[str, Any]:
    """Per engineer: proposals, rounds, fallback rate; each figure's mean and cluster-bootstrap interval over rounds
    (the proposals of one round form a cluster); the difference from the fixed reference in the same round; the
    per-run mean difference (one run: one seed) and the mean share of the budget per group."""
    out: dict[str, Any] = {}
    for engineer in engineers:
        mine = [line for line in lines if line["engineer"] == engineer]
        if not mine:
            continue
        rounds: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
        for line in mine:
            rounds.setdefault((line["run"], line["round"]), []).append(line)
        entry: dict[str, Any] = {"proposals": len(mine), "rounds": len(rounds),
                                 "fallback_rate": round(sum(bool(l["fallback"]) for l in mine) / len(mine), 6)}
        for key in FIGURES:
            values = [float(l[key]) for l in mine]
            interval = cluster_bootstrap([[float(l[key]) for l in c] for c in rounds.values()], seed=seed)
            entry[key] = {"mean": round(sum(values) / len(values), 6), "ci95": None if interval is None else [round(x, 6) for x in interval]}
        if engineer != REFERENCE:
            for key in ("kept_per_budget", "learnability"):
                values = [float(l["vs_fixed"][key]) for l in mine]
                interval = cluster_bootstrap([[float(l["vs_fixed"][key]) for l in c] for c in rounds.values()], seed=seed)
                entry[f"vs_fixed_{key}"] = {"mean": round(sum(values) / len(values), 6),
                                            "ci95": None if interval is None else [round(x, 6) for x in interval]}
            per_run: dict[str, list[float]] = {}
            for line in mine:
                per_run.setdefault(line["run"], []).append(float(line["vs_fixed"]["kept_per_budget"]))
            entry["per_run_vs_fixed_kept"] = {run: round(sum(v) / len(v), 6) for run, v in per_run.items()}
            entry["runs_above_fixed"] = sum(v > 0 for v in entry["per_run_vs_fixed_kept"].values())
            entry["runs_below_fixed"] = sum(v < 0 for v in entry["per_run_vs_fixed_kept"].values())
        shares: dict[str, float] = {}
        for line in mine:
            for g, cell in line["by_group"].items():
                shares[g] = shares.get(g, 0.0) + cell["share"] / len(mine)
        entry["budget_share"] = {g: round(v, 6) for g, v in shares.items()}
        out[engineer] = entry
    return out


#: where a scored run keeps its slice of each scoring (``<run>/engineer-score/<output name>.json``), for its report
RUN_RECORD_DIR = "engineer-score"


def _record_name(output: Path) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "-", output.resolve().name).strip("-.") or "score"


def record_in_runs(result: Mapping[str, Any], output: str | Path) -> list[Path]:
    """Each scored run's own slice (its rounds' lines summarised, its self-predictions, the settings and where the
    whole result is) in ``<run>/engineer-score/<output name>.json``, and its plot in ``<run>/report/``: what
    ``envengineer report`` shows as the run's engineer-benchmark section."""
    from envengineer.fileio import write_json

    name, written = _record_name(Path(output)), []
    for run in result["runs"]:
        mine = [line for line in result["lines"] if line["run"] == run["path"]]
        predictions = [p for p in result.get("predictions") or [] if p["run"] == run["path"]]
        record = {"output": str(Path(output).resolve()), "settings": result["settings"], "engineers": result["engineers"],
                  "rounds": run["rounds"], "summary": summarize(mine, result["engineers"], seed=result["settings"]["seed"]),
                  "self_prediction": summarize_predictions(predictions, seed=result["settings"]["seed"]) if predictions else None}
        path = Path(run["path"]) / RUN_RECORD_DIR / f"{name}.json"
        write_json(path, record)
        written.append(path)
        try:
            plot({"engineers": result["engineers"], "lines": mine, "summary": record["summary"]},
                 Path(run["path"]) / "report" / f"engineer-score-{name}.png")
        except ImportError:
            pass
    return written


def report_sections(run_dir: str | Path) -> list[tuple[str, str]]:
    """The run report's engineer-benchmark sections: one per scoring recorded in ``<run>/engineer-score/`` (a table per
    engineer: proposals, fallback rate, kept/B and its difference from fixed with their intervals, Σp(1−p), the
    self-prediction's Brier beside its two references; and the plot of the run's proposals)."""
    import html

    folder = Path(run_dir) / RUN_RECORD_DIR
    sections = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            summary, known = record["summary"], record.get("self_prediction") or {}
        except (ValueError, KeyError, TypeError) as exc:
            sections.append((f"Engineer benchmark: {path.stem}", f"<p>{html.escape(str(path))}: unreadable ({html.escape(str(exc))})</p>"))
            continue

        def cell(entry: Any, signed: bool = False) -> str:
            if not isinstance(entry, dict) or entry.get("mean") is None:
                return ""
            ci = entry.get("ci95")
            form = "+.1f" if signed else ".1f"
            return html.escape(f"{entry['mean']:{form}}" + (f" [{ci[0]:{form}}, {ci[1]:{form}}]" if ci else ""))

        settings = record.get("settings", {})
        rows = []
        for name in record.get("engineers", []):
            entry = summary.get(name)
            if not entry:
                continue
            brier = (known.get(name) or {}).get("brier") or {}
            rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in (
                html.escape(str(name)), entry["proposals"], f"{100 * entry['fallback_rate']:.0f}%", cell(entry["kept_per_budget"]),
                cell(entry.get("vs_fixed_kept_per_budget"), signed=True), f"{entry['learnability']['mean']:.3f}",
                "" if brier.get("mean") is None else html.escape(f"{brier['mean']:.3f} (0.5 everywhere {known[name]['brier_half']:.3f})"),
            )) + "</tr>")
        image = f"report/engineer-score-{path.stem}.png"
        body = (f"<p>{html.escape(str(len(record.get('rounds', []))))} rounds scored, K={settings.get('proposals')} proposals, "
                f"M={settings.get('instances')} instances, S={settings.get('draws')} draws (<code>envengineer engineers score</code>; "
                f"the whole result: <code>{html.escape(str(record.get('output')))}</code>). kept/B: expected kept prompts per budget; "
                "− fixed: minus the round's config unchanged; intervals: 95% bootstrap over rounds.</p>"
                "<table><tr><th>engineer</th><th>proposals</th><th>fell back</th><th>kept/B</th><th>− fixed</th><th>Σp(1−p)</th>"
                "<th>self-prediction Brier</th></tr>" + "".join(rows) + "</table>"
                + (f'<p><img src="{html.escape(image)}" alt="proposals scored"></p>' if (Path(run_dir) / image).is_file() else ""))
        sections.append((f"Engineer benchmark: {path.stem}", body))
    return sections


def write_results(result: Mapping[str, Any], output: str | Path) -> list[Path]:
    """``score.json`` (settings, runs, summary, cost) and ``proposals.jsonl`` (one line per scored config), atomically,
    and ``score.png`` when matplotlib is installed; each run's slice for its report (:func:`record_in_runs`)."""
    from envengineer.fileio import write_json, write_jsonl

    out = Path(output)
    written = [out / "score.json", out / "proposals.jsonl"]
    write_json(written[0], {k: v for k, v in result.items() if k not in ("lines", "predictions")})
    write_jsonl(written[1], result["lines"])
    if result.get("predictions") is not None:
        written.append(out / "predictions.jsonl")
        write_jsonl(written[-1], result["predictions"])
    try:
        written.append(plot(result, out / "score.png"))
    except ImportError:
        pass
    written += record_in_runs(result, out)
    return written


def plot(result: Mapping[str, Any], path: Path) -> Path:
    """Each proposal as a point: its expected kept prompts minus the fixed reference's in the same round, against
    fallback (0: applied, 1: fell back; points spread sideways per engineer), each engineer's mean at its fallback
    rate; the fixed reference is the line at 0."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ImportError("matplotlib") from exc
    from envengineer.plugins.report.plots import _PALETTE, _new_figure, _save

    engineers = [e for e in result["engineers"] if e != REFERENCE]
    fig, axes = _new_figure(6.4, 4.2)
    ax = axes[0][0]
    ax.axhline(0, color="#111827", lw=1.5, label="fixed (the round's config)")
    width = 0.3
    for i, (engineer, color) in enumerate(zip(engineers, _PALETTE * 3)):
        mine = [l for l in result["lines"] if l["engineer"] == engineer]
        offset = (i - (len(engineers) - 1) / 2) * width / max(1, len(engineers))
        rng = random.Random(f"{engineer}")
        xs = [float(l["fallback"]) + offset + rng.uniform(-0.02, 0.02) for l in mine]
        ys = [l["vs_fixed"][PRIMARY] for l in mine]
        ax.scatter(xs, ys, s=14, color=color, alpha=0.45, edgecolors="none")
        entry = result["summary"].get(engineer) or {}
        mean = (entry.get(f"vs_fixed_{PRIMARY}") or {}).get("mean")
        if mean is not None:
            ax.scatter([entry["fallback_rate"]], [mean], s=90, color=color, edgecolors="black", marker="D",
                       label=f"{engineer} (mean)", zorder=3)
    ax.set_xlim(-0.25, 1.25)
    ax.set_xticks([0, 0.5, 1], ["0 (applied)", "0.5", "1 (fell back)"])
    ax.set_xlabel("fallback (points: each proposal; diamonds: the engineer's rate)")
    ax.set_ylabel("expected kept prompts per budget − fixed")
    ax.set_title("engineer benchmark: proposals scored for the round's checkpoint")
    ax.legend(fontsize=7, loc="best")
    return _save(fig, path)
