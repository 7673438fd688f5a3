"""What the loop hands a trainer for one round, and what it gets back.

Kept free of heavy imports: the loop and the trainers share these types, and
``import envengineer`` must not pull in torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

#: Keys of one line of ``curves.jsonl`` (missing values are written as null).
CURVE_KEYS = ("step", "reward_mean", "reward_std", "zero_std_frac", "kl", "completion_length", "loss", "learning_rate")

#: How a round's budget is counted (the run config's ``budget_mode``): ``instances``: the round
#: trains on ``budget`` fresh instances, whatever they give; ``kept_prompts``: the trainer draws
#: fresh instances from the same config until ``budget`` prompts with mixed outcomes (neither
#: always right nor always wrong when sampled) are kept, so engineers compare at equal optimizer steps.
BUDGET_MODES = ("instances", "kept_prompts")

#: What a trainer writes beside its checkpoint: one line per training prompt (see :mod:`envengineer.loop.signal`)
ROLLOUTS_FILE = "rollouts.jsonl"

#: What a trainer's ``reward`` option rewards: ``valid`` (R_acc) or the validator's graded ``score``.
REWARDS = ("valid", "score")


def reward_value(verdict: Any, reward: str = "valid", optimality_bonus: float = 0.0) -> float:
    """One response's reward: R_acc (``valid``) or ``Verdict.score`` (``score``), plus the bonus when optimal."""
    base = float(verdict.score) if reward == "score" else float(verdict.reward)
    return base + (float(optimality_bonus) if verdict.valid and verdict.optimal else 0.0)


def reward_text(reward: str = "valid", optimality_bonus: float = 0.0) -> str:
    """The reward as the T context module's training details describe it."""
    text = "R_acc (1 valid, 0 otherwise)" if reward != "score" else "the validator's graded score in [0, 1]"
    return text + (f" + {optimality_bonus} if optimal" if optimality_bonus else "")


@dataclass
class TrainRequest:
    """One round of training: start from ``policy_path``, train on this round's ``records``."""

    policy_path: Path
    records: list[dict[str, Any]]
    generator: Any  # envengineer.components.Generator
    validator: Any  # envengineer.components.Validator
    out_dir: Path
    seed: int = 0
    round: int = 0
    prompt_style: str = "full"
    #: the policy's ``chat_template_kwargs`` for chat prompts (None: the trainer's default), so
    #: training renders prompts exactly as evaluation does
    chat_template_kwargs: dict[str, Any] | None = None
    #: the loop's validation set (a trainer that validates on its own, e.g. verl, may use it)
    validation_records: list[dict[str, Any]] | None = None
    #: the run config's task section (name and options), for trainers whose reward runs in other processes
    task: dict[str, Any] | None = None
    #: ``instances`` (train on ``records``) or ``kept_prompts`` (see :data:`BUDGET_MODES`)
    budget_mode: str = "instances"
    #: ``kept_prompts``: prompts with mixed outcomes to keep (the run's budget)
    kept_target: int = 0
    #: ``kept_prompts``: at most this many instances drawn in all, ``records`` included (the cap is recorded)
    max_draws: int = 0
    #: ``draw(n, part)``: ``n`` fresh instances from the round's config, a different deterministic set
    #: for each ``part`` >= 1 (``records`` are part 0); the loop keeps what was drawn in the round's
    #: ``train/drawn.jsonl``. None: the round cannot draw more.
    draw: Callable[[int, int], list[dict[str, Any]]] | None = None
    #: the run's live experiment trackers, ``{name: settings}`` (:meth:`envengineer.components.roles.Tracker.trainer_settings`:
    #: a log directory, a run id), for a trainer that writes its own step metrics into the same tracker runs
    trackers: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: optimizer steps of the rounds before this one: a trainer logging to a tracker adds it to its own step
    #: counter, so the rounds' curves join up
    step_offset: int = 0


@dataclass
class TrainResult:
    """The new checkpoint (a Hugging Face model directory), its curves, and summary metrics.

    ``launch``: how this machine ran the round (kernels chosen, what was dropped), recorded under ``launch`` in the
    round's ``train/details.json``; unlike ``describe()`` it may differ from machine to machine, so the engineer's
    context never shows it."""

    checkpoint: Path
    curves: Path
    metrics: dict[str, Any] = field(default_factory=dict)
    launch: dict[str, Any] = field(default_factory=dict)


@dataclass
class Drawn:
    """What :func:`fill_kept` sampled: every record judged (in order), its rewards and validity, which were kept."""

    records: list[dict[str, Any]] = field(default_factory=list)
    rewards: list[list[float]] = field(default_factory=list)
    valid: list[list[bool]] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)  # indices into records
    info: dict[str, Any] = field(default_factory=dict)


def screening_samples(prefilter_samples: int, num_generations: int, budget_mode: str) -> int:
    """Samples per prompt before training (0: none): the trainer's ``prefilter_samples``, and in
    ``kept_prompts`` mode, which must judge a prompt to keep it, the GRPO group size when that is off."""
    if prefilter_samples:
        return prefilter_samples
    return num_generations if budget_mode == "kept_prompts" else 0


def mixed(valid: list[bool]) -> bool:
    """Sampled outcomes that are neither all right nor all wrong: a GRPO group with signal."""
    return any(valid) and not all(valid)


def fill_kept(request: TrainRequest, judge: Callable[[list[dict[str, Any]]], list[tuple[list[float], list[bool]]]],
              *, target: int | None = None) -> Drawn:
    """Judge the round's records, and in ``kept_prompts`` mode draw more (``request.draw``, one budget
    at a time) until ``target`` prompts with mixed outcomes are kept or ``request.max_draws`` instances
    were judged. ``judge(records)`` samples each record and returns its rewards and validity.

    ``instances`` mode: the round's records only, every mixed one kept. The cap, and whether it
    stopped the filling, are recorded in ``info``."""
    fill = request.budget_mode == "kept_prompts"
    target = (target if target is not None else request.kept_target) if fill else None
    out = Drawn()
    batch, part = list(request.records), 0
    cap = max(request.max_draws, len(batch)) if fill else len(batch)
    while batch:
        batch = batch[: cap - len(out.records)]
        for record, (rewards, valid) in zip(batch, judge(batch)):
            index = len(out.records)
            out.records.append(record)
            out.rewards.append(list(rewards))
            out.valid.append(list(valid))
            if mixed(list(valid)) and (target is None or len(out.kept) < target):
                out.kept.append(index)
        if not fill or len(out.kept) >= target or len(out.records) >= cap or request.draw is None:  # type: ignore[operator]
            break
        part += 1
        batch = request.draw(max(1, len(request.records)), part)
    out.info = {"budget_mode": request.budget_mode, "judged": len(out.records), "kept": len(out.kept)}
    if fill:
        out.info.update({"kept_target": target, "max_draws": cap, "capped": len(out.kept) < target, "draws": part + 1})  # type: ignore[operator]
    return out
