"""The simulated student: a policy and a trainer with no neural network, whose learning dynamics
are stated here and reward training at the frontier. A positive control, not a model of a real
policy: a correct engineer must beat a fixed environment on it, so an engineer whose proposals
are ignored, projected away, or read the wrong round fails in seconds.

**The student** (``student.json`` in a checkpoint folder) holds one latent skill ``s_g`` per group
of the task's primary grouping. An instance ``x`` of group ``g`` has difficulty

    d(x) = spacing · rank(g) + knob_weight · Σ_k hardness_k(x)

where ``rank(g)`` is the group's place in the task's group order (0 for the first) and
``hardness_k(x)`` in [0, 1] is how far the instance's value of difficulty knob ``k`` (declared
``harder`` up or down; read with :meth:`Generator.instance_knobs`) lies from the knob's easy end
toward its hard end. The student solves it with probability

    p(x) = 1 / (1 + exp(-slope · (s_g - d(x))))

**Answers**: a solved instance gets the task's reference answer (:meth:`Generator.reference_completion`),
an unsolved one an empty answer, and the task's own validator scores both. Greedy answers use one
uniform number per instance (``u(x)``, from the instance id and ``noise_seed``): solved iff
``u(x) < p(x)``, so two students meet the same luck on the same instance, and a paired comparison
of two runs only sees their skills. Sampled answers draw afresh from ``seed``.

**A round of training** (the ``simulated`` trainer) samples each prompt's GRPO group of
``num_generations`` outcomes (Bernoulli ``p(x)``) ``epochs`` times. A group whose outcomes are all
equal teaches nothing (as in GRPO, its advantages are zero); a mixed one contributes its sampled
``p̂ (1 − p̂)``. With ``L_g`` the sum over group ``g``'s prompts, the round adds

    Δs_g = learning_rate · L_g / (1 + L_g / saturation)

to ``s_g``, and ``transfer`` times that to each neighbouring group in the order; a group that
gained nothing loses ``forget`` (never below its starting skill). So the rounds that gain most
are the ones that put their budget where sampled success is near one half.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from envengineer.api import (
    ROLLOUTS_FILE,
    ConfigError,
    InputError,
    Policy,
    TrainRequest,
    TrainResult,
    Trainer,
    cache_root,
    fill_kept,
    hookimpl,
    read_json,
    rollout_line,
    score_response,
    screening_samples,
    write_json,
    write_jsonl,
)

STUDENT_FILE = "student.json"


# ------------------------------------------------------------------------ dynamics


def uniform(*parts: Any) -> float:
    """A number in [0, 1) from ``parts``, the same on every machine."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:7], "big") / 2**56


def sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


class Student:
    """Skills per group and the parameters that turn them into success probabilities."""

    def __init__(self, data: Mapping[str, Any], generator: Any) -> None:
        self.params = dict(data["params"])
        self.skills = {str(g): float(s) for g, s in data["skills"].items()}
        self.generator = generator
        self.order = {g: i for i, g in enumerate(generator.groups())}
        self.knobs = [k for k in generator.difficulty_knobs() if k.easy_end is not None and k.hard_end is not None]

    @classmethod
    def load(cls, folder: str | Path, generator: Any) -> Student:
        path = Path(folder) / STUDENT_FILE
        data = read_json(path, missing=f"a simulated student's checkpoint folder holds {STUDENT_FILE}")
        if not isinstance(data, dict) or not isinstance(data.get("params"), dict) or not isinstance(data.get("skills"), dict):
            raise InputError(f"{path}: expected an object with params and skills")
        return cls(data, generator)

    def to_dict(self) -> dict[str, Any]:
        return {"params": self.params, "skills": {g: round(s, 9) for g, s in self.skills.items()}}

    def save(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / STUDENT_FILE, self.to_dict())
        return folder

    def skill(self, group: str) -> float:
        return self.skills.get(group, float(self.params["initial_skill"]))

    def difficulty(self, record: Mapping[str, Any]) -> float:
        group = self.generator.group(record)
        rank = self.order.get(group, len(self.order))
        values = self.generator.instance_knobs(record)
        hard = 0.0
        for knob in self.knobs:
            if knob.name in values:
                easy, end = float(knob.easy_end), float(knob.hard_end)
                hard += min(1.0, max(0.0, (values[knob.name] - easy) / (end - easy))) if end != easy else 0.0
        return float(self.params["spacing"]) * rank + float(self.params["knob_weight"]) * hard

    def p(self, record: Mapping[str, Any]) -> float:
        group = self.generator.group(record)
        return sigmoid(float(self.params["slope"]) * (self.skill(group) - self.difficulty(record)))


# -------------------------------------------------------------------------- policy


class SimulatedPolicyOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(None, description="a checkpoint folder holding student.json (the loop passes each round's)")
    prompt_style: str = Field("full", description="the prompt style whose answer format the reference answers take")
    initial_skill: float = Field(1.5, description="every group's skill at the start")
    slope: float = Field(4.0, gt=0, description="how sharply success falls with difficulty above skill")
    spacing: float = Field(1.0, ge=0, description="difficulty added per place in the task's group order")
    knob_weight: float = Field(1.0, ge=0, description="difficulty added by each difficulty knob from its easy to its hard end")
    temperature: float = Field(0.0, ge=0, description="0: greedy (one fixed uniform number per instance); >0: sampled with seed")
    seed: int = Field(0, description="seed of sampled answers")
    noise_seed: int = Field(0, description="seed of the per-instance numbers greedy answers compare with p(x)")


class SimulatedPolicy(Policy):
    name: ClassVar[str] = "simulated"
    description: ClassVar[str] = "a simulated student (no network): per-group skill, logistic success; a positive control for engineers"
    Options: ClassVar[type[BaseModel]] = SimulatedPolicyOptions
    options: SimulatedPolicyOptions

    def __init__(self, options: BaseModel | None = None) -> None:
        super().__init__(options)
        self._calls = 0  # sampled calls so far: each draws afresh, reproducibly

    def params(self) -> dict[str, Any]:
        o = self.options
        return {"initial_skill": o.initial_skill, "slope": o.slope, "spacing": o.spacing, "knob_weight": o.knob_weight}

    def prepare(self, *, generator: Any = None, force: bool = False, progress: Any = None) -> Path:
        """The starting student: ``path`` when given, else one folder per parameters under the cache."""
        if self.options.path:
            return Path(self.options.path)
        params = self.params()
        key = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]
        folder = cache_root() / "simulated" / key
        if force or not (folder / STUDENT_FILE).is_file():
            write_json(folder / STUDENT_FILE, {"params": params, "skills": {}})
        return folder

    def with_path(self, path: str | Path) -> SimulatedPolicy:
        return type(self)(self.options.model_copy(update={"path": str(path)}))

    def sampling(self, *, temperature: float, seed: int) -> SimulatedPolicy:
        return type(self)(self.options.model_copy(update={"temperature": float(temperature), "seed": int(seed)}))

    def describe(self) -> dict[str, Any]:
        o = self.options
        return {"policy": self.name, "path": o.path, "decoding": "greedy" if o.temperature == 0 else "sampling",
                "temperature": o.temperature, "seed": o.seed, "noise_seed": o.noise_seed}

    def evaluation_key(self) -> str | None:
        if not self.options.path or self.options.temperature > 0:
            return None
        path = Path(self.options.path) / STUDENT_FILE
        if not path.is_file():
            return None
        return json.dumps({"student": hashlib.sha256(path.read_bytes()).hexdigest(), "noise_seed": self.options.noise_seed,
                           "style": self.options.prompt_style})

    def sample(self, prompts: Sequence[Any], *, n: int = 1) -> list[list[str]]:
        raise ConfigError("policy simulated: the simulated student answers instances, not prompts; it cannot serve as "
                          "the checkpoint engineer's model or as a solver of free prompts")

    def answer(self, generator: Any, record: Mapping[str, Any], style: str) -> str:
        """The task's reference completion of ``record``, solved once per process: the validation and test sets
        repeat every round and every run of a suite, and the answer is a function of the record and the style."""
        key = (type(generator).__qualname__, style, hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest())
        found = _REFERENCE_ANSWERS.get(key)
        if found is None:
            found = generator.reference_completion(record, style)
            if len(_REFERENCE_ANSWERS) >= _REFERENCE_ANSWERS_MAX:
                _REFERENCE_ANSWERS.pop(next(iter(_REFERENCE_ANSWERS)))  # the oldest first
            _REFERENCE_ANSWERS[key] = found
        return found

    def sample_records(self, generator: Any, records: Sequence[Mapping[str, Any]], *, style: str, n: int = 1) -> list[list[str]]:
        if not self.options.path:
            raise ConfigError("policy.simulated.path: no student yet: prepare() it first")
        student = Student.load(self.options.path, generator)
        out: list[list[str]] = []
        self._calls += 1
        for record in records:
            p, rid = student.p(record), generator.record_id(record)
            if self.options.temperature == 0:
                solved = [uniform("greedy", self.options.noise_seed, rid) < p] * n
            else:
                solved = [uniform("sampled", self.options.seed, self._calls, rid, k) < p for k in range(n)]
            out.append([self.answer(generator, record, style) if ok else "" for ok in solved])
        return out


#: reference answers by (generator, style, sha256 of the record), shared by the process's simulated policies
_REFERENCE_ANSWERS: dict[tuple[str, str, str], str] = {}
_REFERENCE_ANSWERS_MAX = 200_000


# ------------------------------------------------------------------------- trainer


class SimulatedTrainerOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    num_generations: int = Field(8, ge=2, description="outcomes sampled per prompt (the GRPO group)")
    epochs: int = Field(1, ge=1, description="passes over the round's prompts (a fresh group each pass)")
    learning_rate: float = Field(0.05, ge=0, description="skill gained per unit of Σ p̂(1 − p̂) over a group's prompts")
    saturation: float = Field(50.0, gt=0, description="Σ p̂(1 − p̂) at which a group's gain in one round is halved")
    transfer: float = Field(0.3, ge=0, le=1, description="share of a group's gain that each neighbouring group gains too")
    forget: float = Field(0.02, ge=0, description="skill lost by a group that gained nothing in a round (never below the start)")
    prefilter_samples: int = Field(0, ge=0, description="sample each prompt this many times first and train only on mixed ones (0: off; kept_prompts mode: num_generations when 0)")
    prompts_per_step: int = Field(8, ge=1, description="prompts per optimizer step, for the steps count")
    temperature: float = Field(1.0, gt=0, description="the rollouts' temperature, recorded (the student samples Bernoulli p(x) at any)")


class SimulatedTrainer(Trainer):
    name: ClassVar[str] = "simulated"
    description: ClassVar[str] = "trains the simulated student: skill gained in proportion to sampled p(1-p) per group (a positive control)"
    Options: ClassVar[type[BaseModel]] = SimulatedTrainerOptions
    options: SimulatedTrainerOptions
    budget_modes: ClassVar[tuple[str, ...]] = ("instances", "kept_prompts")

    @property
    def epochs(self) -> float:
        return float(self.options.epochs)

    @property
    def sampling_temperature(self) -> float:
        return self.options.temperature

    def describe(self) -> dict[str, Any]:
        o = self.options
        return {"algorithm": "simulated student (no network): skill += learning_rate · Σ p̂(1 − p̂) per group, saturating",
                **o.model_dump()}

    def train(self, request: TrainRequest) -> TrainResult:
        o = self.options
        generator, validator = request.generator, request.validator
        student = Student.load(request.policy_path, generator)
        rng = random.Random(f"simulated|{request.seed}")
        style = request.prompt_style
        answers: dict[str, str] = {}

        def outcomes(record: Mapping[str, Any], k: int) -> tuple[list[float], list[bool]]:
            p = student.p(record)
            solved = [rng.random() < p for _ in range(k)]
            rewards: list[float] = []
            for ok in solved:  # the task's validator scores what the student wrote, as for a real policy
                rid = generator.record_id(record)
                if ok and rid not in answers:
                    answers[rid] = generator.reference_completion(record, style)
                verdict = score_response(validator, generator, record, answers[rid] if ok else "", style)
                rewards.append(float(verdict.reward))
            return rewards, [r > 0 for r in rewards]

        screen = screening_samples(o.prefilter_samples, o.num_generations, request.budget_mode)
        if screen:
            drawn = fill_kept(request, lambda batch: [outcomes(r, screen) for r in batch])
            records, judged = drawn.records, list(zip(drawn.rewards, drawn.valid))
            trained = set(drawn.kept)
            info = drawn.info
        else:
            records, judged, trained, info = list(request.records), [([], [])] * len(request.records), set(range(len(request.records))), {}
        if not records:
            raise ConfigError("trainer.simulated: the round has no training instances")
        learn: dict[str, float] = {}
        lines = []
        for i, record in enumerate(records):
            rewards, valid = list(judged[i][0]), list(judged[i][1])
            groups: list[list[float]] = []
            if i in trained:
                for _ in range(o.epochs):
                    r, v = outcomes(record, o.num_generations)
                    groups.append(r)
                    rewards += r
                    valid += v
                    share = sum(v) / len(v)
                    g = generator.group(record)
                    learn[g] = learn.get(g, 0.0) + share * (1 - share)
            lines.append(rollout_line(generator.record_id(record), rewards, valid, kept=i in trained, groups=groups))
        before = dict(student.skills)
        order = list(generator.groups())
        gains = {g: o.learning_rate * x / (1 + x / o.saturation) for g, x in learn.items()}
        total = {g: 0.0 for g in [*order, *(g for g in gains if g not in order)]}  # in the task's order: student.json the same bytes in every process
        for g, gain in gains.items():
            total[g] += gain
            if g in order:
                i = order.index(g)
                for j in (i - 1, i + 1):
                    if 0 <= j < len(order):
                        total[order[j]] += o.transfer * gain
        start = float(student.params["initial_skill"])
        for g, gain in total.items():
            s = student.skill(g)
            student.skills[g] = s + gain if gain > 0 else max(min(start, s), s - o.forget)
        out = Path(request.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_jsonl(out / ROLLOUTS_FILE, lines)
        checkpoint = student.save(out / "checkpoint")
        curves = out / "curves.jsonl"
        curves.write_text("")
        steps = math.ceil(len(trained) / o.prompts_per_step) * o.epochs
        metrics = {
            "prompts_given": len(request.records), "prompts_used": len(trained), "steps": steps,
            **({"prefilter_prompts": len(records), "prefilter_kept": len(trained)} if screen else {}),
            **{k: v for k, v in info.items() if isinstance(v, (int, float, bool)) and k != "budget_mode"}, "trained_prompts": len(trained),
            "skill_gain": round(sum(student.skills.get(g, start) - before.get(g, start) for g in total), 6),
        }
        return TrainResult(checkpoint=checkpoint, curves=curves, metrics=metrics)


@hookimpl
def register_policies(register):
    register(SimulatedPolicy)


@hookimpl
def register_trainers(register):
    register(SimulatedTrainer)
