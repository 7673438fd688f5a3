"""What the engineer benchmark reads of a recorded run: its task, policy and trainer and the rounds it recorded
(:func:`load_recorded_run`), the engineers to score (:func:`engineer_specs`), the settings, and what the run
measured after each round (:func:`next_gain`, :func:`next_mixed`), against which ``--recorded`` checks the score."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envengineer.errors import ConfigError, InputError

#: the figures of one scored config that the tables and the plot compare (higher is better for the first two)
FIGURES = ("kept_per_budget", "learnability", "mixed", "all_right", "all_wrong", "success")
#: the figure the plot and the validation use
PRIMARY = "kept_per_budget"
REFERENCE = "reference"  # the round's config unchanged: the fixed environment
RECORDED = "recorded"  # the config the run trained on next (``--recorded``)


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
    #: context options laid over each run's own ``context`` section for the engineers' requests (e.g. ``{"order":
    #: "stable-first"}`` for a server's prompt cache); None: the run's context as it ran
    context: dict[str, Any] | None = None


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


def load_recorded_run(registry: Any, path: str | Path) -> RecordedRun:
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


# --------------------------------------------------------------------------------------------- what the run measured next


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


def arm_name(run: RecordedRun) -> str:
    engineer = run.config.get("engineer")
    return str(engineer.get("name")) if isinstance(engineer, dict) else str(engineer)
