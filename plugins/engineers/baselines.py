"""Non-LLM engineers: fixed, random, curriculum, heuristic, learnability, and the negative control inverted.

They answer through the same pipeline as the LLM engineers (a partial update, projected
by the task). They are task-generic: a group's success is its sampled success on the round's
own training prompts (the training signal, ``Evidence.signal``) where the trainer recorded
enough samples of it, else its validation valid rate (the report's ``by[<first grouping>]``);
the knob table, the budget share and the difficulty knobs come from the generator's
declaration (:attr:`Generator.knob_table`, :attr:`Generator.knobs`), so each move is a whole
number of the knob's declared step and stays within its bounds.

A task without a knob table (its declared knobs are top-level fields of the config: most
verifiers tasksets) is **one group**, :data:`WHOLE`: its knobs are that group's row
(:func:`knob_groups`) and its evidence the signal's and the report's overall cells
(:func:`group_cells`), so every rule moves its difficulty knobs as it moves one group's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from envengineer.api import (
    DesignOutcome,
    DesignRequest,
    Engineer,
    WHOLE,
    EngineerReply,
    Knob,
    factual_note,
    group_success,
    retired_options,
    toward,
)


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid")


def knob_groups(generator: Any, config: Any) -> dict[str, dict[str, Any]]:
    """``{group: {knob: value}}`` of the declared knobs in ``config`` (``Generator.knob_rows``: a task without a
    knob table is one group, :data:`WHOLE`), in the generator's group order (groups it does not list follow)."""
    values = generator.knob_rows(config)
    if generator.knob_table is None:
        return values
    order = [g for g in generator.groups() if g in values]
    return {g: values[g] for g in order + [g for g in values if g not in order]}


def group_cells(generator: Any, summary: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """``{group: cell}`` of a training signal or a validation summary, the groups :func:`knob_groups` names.

    With a knob table: the cells of the summary's first grouping (the task's primary, the one the
    table is keyed by). Without one: the overall cell as the one group :data:`WHOLE`, whatever
    groupings the task declares for its reports (it has one set of knobs, so one group of evidence);
    {} when the overall cell counts nothing."""
    if generator.knob_table is not None:
        return group_success(summary)
    overall = (summary or {}).get("overall") or {}
    counted = int(overall.get("n") or 0) > 0 or int(overall.get("samples") or 0) > 0
    return {WHOLE: dict(overall)} if counted else {}


def budget_note(request: DesignRequest) -> str:
    """Why no share moved, for the note: one group holds the whole budget, or the task declares no share in every group."""
    if request.generator.knob_table is None:
        return f"one group ({WHOLE}: the task has no knob table): it holds the whole budget"
    return "no budget-share knob for every group: shares kept"


def knob_table(request: DesignRequest) -> dict[str, dict[str, Any]]:
    """``{group: {knob: value}}`` of the current config's declared knobs (:func:`knob_groups`): the
    knob table's groups, or the one group :data:`WHOLE` of a task without a table."""
    return knob_groups(request.generator, request.current_config)


def chosen_knobs(request: DesignRequest, names: list[str] | None, default: tuple[Knob, ...], notes: list[str]) -> list[Knob]:
    """The declared knobs an option names (``default`` when it names none); undeclared names are noted and skipped."""
    if names is None:
        return list(default)
    declared = {knob.name: knob for knob in request.generator.knobs}
    unknown = [name for name in names if name not in declared]
    if unknown:
        notes.append(f"ignored {', '.join(unknown)} (declared knobs: {', '.join(declared) or 'none'})")
    return [declared[name] for name in names if name in declared]


def moved(knob: Knob, value: Any, target: float) -> float | int:
    """``target`` on the knob's grid and within its bounds; at least one step away from ``value``
    when ``target`` differs from it (so integer knobs move by whole steps instead of rounding back)."""
    new, old = knob.snap(target), knob.snap(value)
    if new == old and target != value:
        new = knob.shift(old, target - float(value))
    return new


def eased(knob: Knob, value: Any, backoff: float) -> float | int:
    """``value`` moved ``backoff`` of the way toward the knob's easy end (at least one step)."""
    easy = knob.easy_end
    if easy is None:
        return knob.snap(value)
    return moved(knob, value, easy + (float(value) - easy) * (1 - backoff))


def hardened(knob: Knob, value: Any, amount: float) -> float | int:
    """``value`` moved ``amount`` (knob units, at least one step) toward the knob's hard end."""
    if knob.harder == "none":
        return knob.snap(value)
    return moved(knob, value, float(value) + (amount if knob.harder == "up" else -amount))


class Success:
    """Each group's success ``p`` and where it came from: sampled success on the round's training
    prompts where the signal has ``min_samples`` of the group, else the greedy validation valid rate
    (the rate the policy is judged by, on another distribution, and all an older run recorded)."""

    def __init__(self, request: DesignRequest, groups: list[str], min_samples: int, signal: Mapping[str, Any] | None = None,
                 report: Mapping[str, Any] | None = None) -> None:
        ev = request.evidence
        self.cells = group_cells(request.generator, ev.signal if signal is None else signal)
        self.rates = group_cells(request.generator, ev.report if report is None else report)
        self.min_samples = min_samples
        self.p: dict[str, float] = {}
        self.source: dict[str, str] = {}  # group -> "sampled" | "validation"
        self.fallback: dict[str, str] = {}  # group -> why its validation rate was used
        for g in groups:
            cell = self.cells.get(g) or {}
            samples = int(cell.get("samples") or 0)
            if samples >= min_samples and cell.get("success") is not None:
                self.p[g], self.source[g] = float(cell["success"]), "sampled"
                continue
            if g in self.rates:
                self.p[g], self.source[g] = float(self.rates[g].get("valid_rate", 0.0)), "validation"
                if self.cells:
                    self.fallback[g] = f"{samples} samples < min_samples {min_samples}"

    def mixed(self, g: str) -> float | None:
        """The share of the group's training prompts with some samples right and some wrong (None: no signal used)."""
        if self.source.get(g) != "sampled":
            return None
        value = (self.cells.get(g) or {}).get("mixed_share")
        return None if value is None else float(value)

    def label(self, g: str) -> str:
        return f"{self.source[g]} {self.p[g]:.0%}"

    def describe(self) -> str:
        """Which evidence decided, for the note."""
        if not self.cells:
            return "no training signal: validation valid rates"
        text = "sampled success from the training signal"
        if self.fallback:
            text += "; " + ", ".join(f"validation rate for {g} ({why})" for g, why in self.fallback.items())
        return text


class Baseline(Engineer):
    """Shared reply building: a YAML block for the record, the proposal set directly."""

    def reply(self, proposal: dict[str, Any], note: str) -> EngineerReply:
        body = yaml.safe_dump(proposal, sort_keys=False, allow_unicode=True) if proposal else "{}\n"
        return EngineerReply(text=f"{note}\n\n```yaml\n{body}```\n", model=self.name, proposal=proposal, calls=[])

    def summarize(self, request: DesignRequest, outcome: DesignOutcome) -> str | None:
        return factual_note(request, outcome)

    def grouped(self, request: DesignRequest, min_samples: int) -> tuple[dict[str, dict[str, Any]], Success, list[str]] | EngineerReply:
        """The round's knob table, each group's success and the groups that have both; or, when the config holds no
        declared knob or no group has a success rate, the reply (naming this engineer) that keeps the configuration."""
        table = knob_table(request)
        if not table:
            return self.reply({}, f"{self.name}: the config holds no declared knob; keeping the configuration.")
        success = Success(request, list(table), min_samples)
        groups = [g for g in table if g in success.p]
        if not groups:
            return self.reply({}, f"{self.name}: no per-group success (no training signal, no validation rates); keeping the configuration.")
        return table, success, groups


# ------------------------------------------------------------------------ fixed


class FixedEngineer(Baseline):
    name: ClassVar[str] = "fixed"
    description: ClassVar[str] = "never changes the config (the fixed-environment baseline)"

    def propose(self, request: DesignRequest) -> EngineerReply:
        return self.reply({}, "fixed: keeping the current configuration.")


# ----------------------------------------------------------------------- random


class RandomOptions(_Options):
    seed: int | None = Field(
        None,
        description="seed; round n draws with seed + n + 1 (default: the loop's seed for the round, "
        "so a run's seed decides the draws and runs with different seeds differ)",
    )


class RandomEngineer(Baseline):
    name: ClassVar[str] = "random"
    description: ClassVar[str] = "a random valid config from the task's random_config each round (default: every declared knob drawn within its bounds)"
    Options: ClassVar[type[BaseModel]] = RandomOptions

    def propose(self, request: DesignRequest) -> EngineerReply:
        if self.options.seed is None:
            seed = request.seed + 1
        else:
            seed = self.options.seed + request.evidence.round + 1
        config = request.generator.random_config(seed)
        return self.reply(config.model_dump(), f"random: config drawn with seed {seed}.")


# ------------------------------------------------------------------- curriculum


class RampOptions(_Options):
    start: float | None = Field(None, description="the knob's value at the first design step (progress 0), in its own units (default: the curriculum's start)")
    end: float | None = Field(None, description="its value at the last design step (progress 1) (default: the curriculum's end)")
    spread: float | None = Field(None, ge=0, le=1, description="this knob's spread over groups (default: the curriculum's spread)")


_RAMPS = "was removed: ramp any declared knob with ramps, e.g. ramps: {{hole_ratio: {{start: 0.1, end: 0.3}}}}"


class CurriculumOptions(_Options):
    _retired = retired_options(hole_start=_RAMPS, hole_end=_RAMPS, wait_start=_RAMPS, wait_end=_RAMPS)

    tilt: float = Field(1.5, ge=0, description="how strongly budget shifts toward later (harder) groups, times progress (none at the first design step)")
    knobs: list[str] | None = Field(None, description="the difficulty knobs to ramp (default: every knob the task declares harder up or down)")
    start: float = Field(0.2, ge=0, le=1, description="where a ramp starts at the first design step (progress 0): this far from a knob's easy bound toward its hard bound")
    end: float = Field(0.6, ge=0, le=1, description="where a ramp ends at the last design step (progress 1), as the same fraction")
    spread: float = Field(0.4, ge=0, le=1, description="the first group gets 1 - spread of the ramp's way from the easy bound, the last group all of it")
    ramps: dict[str, RampOptions] = Field(default_factory=dict, description="per-knob start, end and spread in the knob's own units (a knob named here is ramped)")


def progress(round: int, rounds_total: int) -> float:
    """Where the design step after round ``round`` is on the schedule: 0 at the first design step
    (the config of round 1), 1 at the last (the config of the last round), evenly between.

    A run of ``rounds_total`` rounds has ``rounds_total - 1`` design steps. With a single one
    (2 rounds) it is the last step, so it gets the end: a short run ends where a long one does.
    Replays past the last design step stay at 1."""
    steps = rounds_total - 1
    if steps <= 1:
        return 1.0
    return min(1.0, max(0.0, round / (steps - 1)))


class CurriculumEngineer(Baseline):
    name: ClassVar[str] = "curriculum"
    description: ClassVar[str] = "hand-designed easy-to-hard schedule over rounds (ignores the evidence)"
    Options: ClassVar[type[BaseModel]] = CurriculumOptions

    def propose(self, request: DesignRequest) -> EngineerReply:
        ev = request.evidence
        o = self.options
        table = knob_table(request)
        if not table:
            return self.reply({}, "curriculum: the config holds no declared knob; keeping the configuration.")
        notes: list[str] = []
        default = request.generator.difficulty_knobs()
        names = o.knobs
        if names is None and o.ramps:  # the declared difficulty knobs, and any other knob given a ramp
            names = [k.name for k in default] + [n for n in o.ramps if n not in {k.name for k in default}]
        ramped = [k for k in chosen_knobs(request, names, default, notes) if k.easy_end is not None]
        share = request.generator.share_knob()
        groups = list(table)
        now = progress(ev.round, ev.rounds_total)
        g = len(groups)
        weights = [math.exp(o.tilt * now * ((i / (g - 1) if g > 1 else 0.5) - 0.5)) for i in range(g)]
        total = sum(weights)
        update: dict[str, dict[str, Any]] = {}
        for i, (group, w) in enumerate(zip(groups, weights)):
            knobs = table[group]
            place = i / (g - 1) if g > 1 else 1.0
            change: dict[str, Any] = {}
            if share is not None and share.name in knobs:
                change[share.name] = share.snap(w / total)
            for knob in ramped:
                if knob.name not in knobs:
                    continue
                ramp = o.ramps.get(knob.name) or RampOptions()
                easy, hard = float(knob.easy_end), float(knob.hard_end)  # type: ignore[arg-type]
                start = ramp.start if ramp.start is not None else easy + o.start * (hard - easy)
                end = ramp.end if ramp.end is not None else easy + o.end * (hard - easy)
                spread = ramp.spread if ramp.spread is not None else o.spread
                value = start + (end - start) * now
                change[knob.name] = knob.snap(easy + (value - easy) * (1 - spread + spread * place))
            if change:
                update[group] = change
        steps = max(1, ev.rounds_total - 1)
        note = (f"curriculum: design step {min(ev.round + 1, steps)} of {steps} (the config of round-{ev.round + 1:02d}), "
                f"progress {now:.2f}" + "".join(f"; {n}" for n in notes) + ".")
        return self.reply(request.generator.knob_proposal(update), note)


# -------------------------------------------------------------------- heuristic


def _renamed(new: str) -> str:
    return f"was renamed {new} (same meaning and default): write {new}: {{value}}"


class HeuristicOptions(_Options):
    _retired = retired_options(
        conflict_failure=_renamed("practice_failure"), conflict_share=_renamed("practice_share"),
        wait_knob=_renamed("practice_knob"), wait_step=_renamed("practice_step"),
    )

    move: float = Field(0.15, ge=0, le=1, description="share of the budget moved from strong to lagging groups each round (within max_share_change)")
    collapse: float = Field(0.05, ge=0, le=1, description="a group whose success is below this has collapsed: it is eased and gets no extra budget")
    backoff: float = Field(0.3, ge=0, le=1, description="a collapsed group's difficulty knobs move this share of the way to their easy bound (at least one step)")
    saturated: float = Field(0.95, ge=0, le=1, description="a group whose success is above this gets harder")
    harden: float = Field(0.05, ge=0, description="how far a saturated group's difficulty knobs move toward hard, in each knob's units (at least one step)")
    practice_failure: str | None = Field(None, description="the failure type that calls for more practice (default: the failure types each "
                                         "practice knob declares in its practices)")
    practice_share: float = Field(0.5, ge=0, le=1, description="share of a group's validation failures above which a practised failure "
                                  "type dominates, so the group gets more practice against it")
    practice_knob: str | None = Field(None, description="the knob raised where a practised failure type dominates (default: every knob "
                                      "that declares practices, the failure types it gives practice against)")
    practice_step: float = Field(0.1, ge=0, description="how far that knob is raised, in its units (at least one step)")
    difficulty_knobs: list[str] | None = Field(None, description="knobs that make a group harder (default: every knob the task declares harder up or down)")
    min_samples: int = Field(16, ge=1, description="a group's success is its sampled success on the round's training prompts when the training "
                             "signal holds at least this many samples of it, else its greedy validation valid rate")
    max_share_change: float = Field(1.5, ge=1, description="a share changes by at most this factor per step, up or down (1.5: between "
                                    "share / 1.5 and share x 1.5), so one round's evidence cannot starve a group; 1 freezes the shares")
    keep_mixed: float | None = Field(0.2, ge=0, le=1, description="a group at least this share of whose training prompts were mixed (some samples "
                                     "right, some wrong: what GRPO learns from) never gives budget away; None: any strong group may")


def shifted_shares(ratio: Mapping[str, float], spare: Mapping[str, float], need: Mapping[str, float], *, move: float,
                   factor: float, low: float, high: float) -> dict[str, float]:
    """New shares of the ``spare`` and ``need`` groups: up to ``move`` of the budget taken from the
    first in proportion to their spare and given to the second in proportion to their need, no share
    leaving ``[low, high]`` or changing by more than ``factor`` (so the total is kept); {} when nothing moves."""
    spare_total = sum(spare.values())
    if not spare or not need or spare_total <= 0:
        return {}
    down = {g: max(0.0, ratio[g] - max(low, ratio[g] / factor)) for g in spare}
    up = {g: max(0.0, min(high, ratio[g] * factor) - ratio[g]) for g in need}
    want = {g: min(move * s / spare_total, down[g]) for g, s in spare.items()}
    total = min(sum(want.values()), sum(up.values()))
    if total <= 0:
        return {}
    scale = total / sum(want.values())
    got = dict.fromkeys(need, 0.0)
    open_, left = set(need), total
    while open_ and left > 1e-15:  # fill in proportion to need; a group at its cap passes the rest on
        weight = sum(need[g] for g in open_)
        capped = [g for g in open_ if left * need[g] / weight >= up[g] - got[g]]
        if not capped:
            for g in open_:
                got[g] += left * need[g] / weight
            break
        for g in capped:
            left -= up[g] - got[g]
            got[g] = up[g]
            open_.discard(g)
    return {**{g: ratio[g] - want[g] * scale for g in spare}, **{g: ratio[g] + got[g] for g in need}}


class HeuristicEngineer(Baseline):
    name: ClassVar[str] = "heuristic"
    description: ClassVar[str] = "evidence-driven rules: budget to lagging groups, more practice where a failure type dominates, back off collapsed groups"
    Options: ClassVar[type[BaseModel]] = HeuristicOptions

    def propose(self, request: DesignRequest) -> EngineerReply:
        o = self.options
        generator = request.generator
        table = knob_table(request)
        success = Success(request, list(table), o.min_samples)
        groups = [g for g in table if g in success.p]
        if not table or not groups:
            return self.reply({}, "heuristic: no declared knob in the config, or no success rate of its groups; keeping the configuration.")
        p = success.p
        previous = self.previous(request, success)
        notes: list[str] = [success.describe()]
        difficulty = chosen_knobs(request, o.difficulty_knobs, generator.difficulty_knobs(), notes)
        practice: list[tuple[Knob, tuple[str, ...]]] = []
        for knob in chosen_knobs(request, None if o.practice_knob is None else [o.practice_knob], tuple(k for k in generator.knobs if k.practices), notes):
            failures = (o.practice_failure,) if o.practice_failure is not None else knob.practices
            if failures:
                practice.append((knob, failures))
        update: dict[str, dict[str, Any]] = {g: {} for g in groups}

        # Budget: from groups above the mean success to lagging (not collapsed) ones; a group whose
        # training prompts are often mixed keeps its share (GRPO learns there), and no share moves
        # by more than max_share_change in one step.
        share = generator.share_knob()
        live = [g for g in groups if p[g] >= o.collapse]
        mean = sum(p[g] for g in live) / len(live) if live else 0.0
        need = {g: mean - p[g] for g in live if p[g] < mean - 1e-9}
        if share is not None and need and all(share.name in table[g] for g in groups):
            ratio = {g: float(table[g][share.name]) for g in groups}
            strong = [g for g in groups if p[g] > mean + 1e-9]
            kept = [g for g in strong if o.keep_mixed is not None and (m := success.mixed(g)) is not None and m > 0 and m >= o.keep_mixed]
            spare = {g: (p[g] - mean) * ratio[g] for g in strong if g not in kept}
            shares = shifted_shares(ratio, spare, need, move=o.move, factor=o.max_share_change, low=share.low, high=share.high)
            for g, value in shares.items():
                update[g][share.name] = share.snap(value)
            learnable = ", ".join(f"{g} ({success.mixed(g):.0%} mixed)" for g in kept)
            if shares:
                notes.append("moved budget toward " + ", ".join(sorted(need, key=lambda g: p[g]))
                             + " from " + ", ".join(g for g in spare if g in shares) + f" (each share within x/÷{o.max_share_change:g})")
                if kept:
                    notes.append(f"kept the share of the learnable {learnable}")
            elif kept and not spare:
                notes.append(f"no budget moved: every group above the mean success ({mean:.0%}) is learnable: {learnable}")
            else:
                notes.append("no budget moved: the groups above the mean success are at their floor")

        for g in groups:
            k = table[g]
            improved = g in previous and p[g] > previous[g]
            if p[g] < o.collapse:
                for knob in difficulty:
                    if knob.name in k:
                        update[g][knob.name] = eased(knob, k[knob.name], o.backoff)
                notes.append(f"{g} collapsed ({success.label(g)}): eased")
                continue
            failures = (success.rates.get(g) or {}).get("failures") or {}
            total = sum(failures.values())
            dominant = next(
                ((knob, kind) for knob, kinds in practice for kind in kinds
                 if knob.name in k and total and failures.get(kind, 0) / total >= o.practice_share),
                None,
            )
            if dominant is not None:
                knob, kind = dominant
                update[g][knob.name] = moved(knob, k[knob.name], float(k[knob.name]) + o.practice_step)
                notes.append(f"{g}: {kind} failures dominate, more {knob.name}")
            elif p[g] > o.saturated and not improved:
                for knob in difficulty:
                    if knob.name in k:
                        update[g][knob.name] = hardened(knob, k[knob.name], o.harden)
                notes.append(f"{g} saturated ({success.label(g)}): harder")
        update = {g: v for g, v in update.items() if v}
        note = "heuristic: " + "; ".join(notes) + ("" if update else "; nothing to change") + "."
        return self.reply(generator.knob_proposal(update), note)

    @staticmethod
    def previous(request: DesignRequest, success: Success) -> dict[str, float]:
        """Last round's success of each group from the same source as this round's, so "improved" compares like with like."""
        if not request.evidence.history:
            return {}
        last = request.evidence.history[-1]
        before = Success(request, list(success.p), success.min_samples, signal=last.signal, report=last.report)
        return {g: before.p[g] for g in success.p if g in before.p and before.source[g] == success.source[g]}


# ----------------------------------------------------------------- learnability


class LearnabilityOptions(_Options):
    mix: float = Field(0.8, ge=0, le=1, description="weight of the learnability allocation against the current shares")
    epsilon: float = Field(0.01, ge=0, le=0.25, description="added to every group's p(1-p) so no group's weight is zero")
    min_samples: int = Field(16, ge=1, description="a group's p is its sampled success on the round's training prompts when the training "
                             "signal holds at least this many samples of it, else its greedy validation valid rate")
    target: float = Field(0.5, ge=0, le=1, description="the success the difficulty knobs steer each group toward")
    band: float = Field(0.2, ge=0, le=1, description="a group whose p is within target ± band keeps its difficulty (GenEnv's α-band)")
    step: float = Field(0.05, gt=0, le=1, description="how far a group outside the band moves each difficulty knob, as a fraction of the "
                        "knob's range (at least one step): harder above the band, easier below")
    stuck_step: float = Field(0.15, gt=0, le=1, description="the move, instead of step, of a group with no valid sample (p = 0: easier) "
                              "or no failed one (p = 1: harder): it gives GRPO nothing to learn from")
    difficulty_knobs: list[str] | None = Field(None, description="knobs that make a group harder (default: every knob the task declares harder up or down)")
    budget_mode: Literal["instances", "kept_prompts"] | None = Field(
        None, description="what the shares allocate: instances (the drawn instances split in proportion to p(1-p) + epsilon) or "
        "kept_prompts (the prompts the trainer keeps, only mixed ones, split so: each group's weight divided by its keep rate); "
        "default: the budget_mode the round recorded (instances when it recorded none)")
    min_keep: float = Field(0.1, gt=0, le=1, description="kept_prompts: a group's keep rate counts as at least this, so a group whose "
                            "prompts were (almost) never mixed cannot take the draws of the round (its share is at most its weight / min_keep)")


def recorded_budget_mode(request: DesignRequest) -> str:
    """The round's ``budget_mode`` as its training details recorded it; ``instances`` when they hold none (older runs)."""
    mode = ((request.evidence.training or {}).get("bookkeeping") or {}).get("budget_mode")
    return mode if mode in ("instances", "kept_prompts") else "instances"


def learnability_weights(p: Mapping[str, float], epsilon: float, keep: Mapping[str, float | None] | None = None,
                         min_keep: float = 0.1) -> tuple[dict[str, float], dict[str, float]]:
    """Each group's allocation weight and the keep rate it was divided by (empty: the instance form).

    The learnability weight is ``w = p (1 - p) + epsilon``. Given ``keep`` (each group's share of
    prompts the prefilter keeps, None where unknown), the weight is ``w / max(keep, min_keep)``: shares
    of *drawn* instances in that proportion make the *kept* prompts, drawn share × keep rate, split in
    proportion to ``w``. A group with no keep rate (its p from validation) counts at the mean of the
    known ones; with none known every group counts alike, which is the instance form."""
    weight = {g: p[g] * (1 - p[g]) + epsilon for g in p}
    if keep is None:
        return weight, {}
    known = [float(v) for v in keep.values() if v is not None]
    fill = sum(known) / len(known) if known else 1.0
    rate = {g: max(min_keep, float(keep[g]) if keep.get(g) is not None else fill) for g in p}
    return {g: weight[g] / rate[g] for g in p}, rate


def keep_label(raw: float | None, used: float) -> str:
    """A group's keep rate for the note: as recorded, or what it was counted as (below min_keep, or unknown)."""
    if raw is None:
        return f"keep unknown, counted {used:.0%}"
    return f"keep {raw:.0%}" if abs(raw - used) < 1e-12 else f"keep {raw:.0%}, counted {used:.0%}"


class LearnabilityEngineer(Baseline):
    name: ClassVar[str] = "learnability"
    description: ClassVar[str] = ("budget in proportion to p(1-p) of each group's sampled success (of the kept prompts at kept-prompt "
                                  "budgets), difficulty toward p = target (PLR / SEC / GenEnv style)")
    Options: ClassVar[type[BaseModel]] = LearnabilityOptions

    def propose(self, request: DesignRequest) -> EngineerReply:
        o = self.options
        generator = request.generator
        grouped = self.grouped(request, o.min_samples)
        if isinstance(grouped, EngineerReply):
            return grouped
        table, success, groups = grouped
        p = success.p
        notes: list[str] = [success.describe(), f"target {o.target:.0%} ± {o.band:.0%}"]
        said: dict[str, list[str]] = {g: [] for g in groups}
        update: dict[str, dict[str, Any]] = {g: {} for g in groups}

        # Difficulty: toward p = target, one step-sized move per round (a larger one with nothing to learn from).
        difficulty = chosen_knobs(request, o.difficulty_knobs, generator.difficulty_knobs(), notes)
        for g in groups:
            if p[g] <= 0:
                harder, size, why = False, o.stuck_step, "no valid sample: easier"
            elif p[g] >= 1:
                harder, size, why = True, o.stuck_step, "no failed sample: harder"
            elif p[g] > o.target + o.band:
                harder, size, why = True, o.step, "above the band: harder"
            elif p[g] < o.target - o.band:
                harder, size, why = False, o.step, "below the band: easier"
            else:
                said[g].append("in band")
                continue
            changed = []
            for knob in difficulty:
                if knob.name not in table[g]:
                    continue
                value = table[g][knob.name]
                new = toward(knob, value, harder, max(size * (knob.high - knob.low), knob.step))
                if new != knob.snap(value):
                    update[g][knob.name] = new
                    changed.append(f"{knob.name} {value:g}→{new:g}")
            bound = "hard" if harder else "easy"
            said[g].append(why + (f" ({', '.join(changed)})" if changed else f" (at its {bound} bound)" if difficulty else " (no difficulty knob)"))

        # Budget: in proportion to p(1-p) + epsilon, mixed with the current shares. At instance budgets
        # the shares split the instances so; at kept-prompt budgets the prefilter keeps only mixed prompts
        # (already about p(1-p) of a group's draws), so the shares are chosen for the kept prompts to split
        # so: each weight divided by the group's keep rate (weighting by p(1-p) twice would starve low-p groups).
        share = generator.share_knob()
        if share is not None and all(share.name in table[g] for g in groups):
            mode = o.budget_mode or recorded_budget_mode(request)
            keep = {g: success.mixed(g) for g in groups} if mode == "kept_prompts" else None
            score, rate = learnability_weights({g: p[g] for g in groups}, o.epsilon, keep, o.min_keep)
            if keep is not None:
                notes.append("kept-prompt budget: shares ∝ (p(1-p) + epsilon) / keep rate, so the kept prompts split ∝ p(1-p) + epsilon"
                             + ("" if any(v is not None for v in keep.values()) else " (no keep rate recorded: counted alike)"))
            ratio = {g: float(table[g][share.name]) for g in groups}
            total = sum(score.values())
            if total <= 0:
                score, total = dict.fromkeys(groups, 1.0), float(len(groups))
            budget = sum(ratio.values())
            for g in groups:
                new = share.snap((1 - o.mix) * ratio[g] + o.mix * budget * score[g] / total)
                update[g][share.name] = new
                said[g].append(f"share {ratio[g]:.4f}→{new:.4f}" + (f" ({keep_label(keep[g], rate[g])})" if keep is not None else ""))
        else:
            notes.append(budget_note(request))
        notes += [f"{g} {success.label(g)}: {', '.join(said[g])}" for g in groups]
        update = {g: v for g, v in update.items() if v}
        return self.reply(generator.knob_proposal(update), "learnability: " + "; ".join(notes) + ".")


# --------------------------------------------------------------------- inverted


class InvertedOptions(_Options):
    mix: float = Field(0.8, ge=0, le=1, description="weight of the inverted allocation against the current shares")
    epsilon: float = Field(0.01, ge=0, le=0.25, description="added to every group's weight so no group's weight is zero")
    min_samples: int = Field(16, ge=1, description="a group's p is its sampled success on the round's training prompts when the training "
                             "signal holds at least this many samples of it, else its greedy validation valid rate")
    target: float = Field(0.5, ge=0, le=1, description="the success the difficulty knobs steer each group away from")
    step: float = Field(0.05, gt=0, le=1, description="how far each difficulty knob moves, as a fraction of the knob's range (at least "
                        "one step): easier for a group above target, harder below it")
    difficulty_knobs: list[str] | None = Field(None, description="knobs that make a group harder (default: every knob the task declares harder up or down)")


class InvertedEngineer(Baseline):
    """``learnability`` turned around: a negative control. The budget goes to the groups whose prompts are all
    right or all wrong (weight ``1 - 4 p (1 - p)``), and each group's difficulty moves away from ``target``: a group
    that mostly succeeds gets easier, one that mostly fails harder, so ever fewer prompts give GRPO anything."""

    name: ClassVar[str] = "inverted"
    description: ClassVar[str] = ("a negative control: budget to the groups whose prompts are all right or all wrong (weight 1 - 4p(1-p)), "
                                  "difficulty away from p = target")
    Options: ClassVar[type[BaseModel]] = InvertedOptions

    def propose(self, request: DesignRequest) -> EngineerReply:
        o = self.options
        generator = request.generator
        grouped = self.grouped(request, o.min_samples)
        if isinstance(grouped, EngineerReply):
            return grouped
        table, success, groups = grouped
        p = success.p
        notes: list[str] = [success.describe(), f"away from {o.target:.0%}"]
        said: dict[str, list[str]] = {g: [] for g in groups}
        update: dict[str, dict[str, Any]] = {g: {} for g in groups}
        difficulty = chosen_knobs(request, o.difficulty_knobs, generator.difficulty_knobs(), notes)
        for g in groups:
            if p[g] == o.target:
                continue
            harder = p[g] < o.target
            changed = []
            for knob in difficulty:
                if knob.name not in table[g]:
                    continue
                value = table[g][knob.name]
                new = toward(knob, value, harder, max(o.step * (knob.high - knob.low), knob.step))
                if new != knob.snap(value):
                    update[g][knob.name] = new
                    changed.append(f"{knob.name} {value:g}→{new:g}")
            if changed:
                said[g].append(("harder" if harder else "easier") + f" ({', '.join(changed)})")
        share = generator.share_knob()
        if share is not None and all(share.name in table[g] for g in groups):
            ratio = {g: float(table[g][share.name]) for g in groups}
            score = {g: 1 - 4 * p[g] * (1 - p[g]) + o.epsilon for g in groups}
            total = sum(score.values())
            budget = sum(ratio.values())
            for g in groups:
                new = share.snap((1 - o.mix) * ratio[g] + o.mix * budget * score[g] / total)
                update[g][share.name] = new
                said[g].append(f"share {ratio[g]:.4f}→{new:.4f}")
        else:
            notes.append(budget_note(request))
        notes += [f"{g} {success.label(g)}: {', '.join(said[g]) or 'kept'}" for g in groups]
        update = {g: v for g, v in update.items() if v}
        return self.reply(generator.knob_proposal(update), "inverted: " + "; ".join(notes) + ".")


ENGINEERS = (FixedEngineer, RandomEngineer, CurriculumEngineer, HeuristicEngineer, LearnabilityEngineer, InvertedEngineer)
