"""Non-LLM engineers: fixed, random, curriculum, heuristic, learnability.

They answer through the same pipeline as the LLM engineers (a partial update, projected
by the task). They are task-generic: per-group valid rates come from the report
(``by[<first grouping>]``), and the knob table, the budget share and the difficulty knobs
come from the generator's declaration (:attr:`Generator.knob_table`, :attr:`Generator.knobs`),
so each move is a whole number of the knob's declared step and stays within its bounds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import yaml
from pydantic import BaseModel, ConfigDict, Field

from envengineer.components import Engineer, Knob, retired_options
from envengineer.api import DesignOutcome, DesignRequest, EngineerReply, factual_note


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid")


def group_rates(report: Mapping[str, Any], dimension: str | None = None) -> dict[str, dict[str, Any]]:
    """``{group: rates}`` of the named grouping, or the first one the report has."""
    by = report.get("by") or {}
    if dimension is not None:
        return dict(by.get(dimension) or {})
    for values in by.values():
        if values:
            return dict(values)
    return {}


def knob_table(request: DesignRequest) -> dict[str, dict[str, Any]]:
    """``{group: {knob: value}}`` of the current config's declared knobs, in the generator's
    group order (groups the generator does not list follow); {} without a knob table."""
    values = request.generator.knob_values(request.current_config)
    order = [g for g in request.generator.groups() if g in values]
    return {g: values[g] for g in order + [g for g in values if g not in order]}


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


class Baseline(Engineer):
    """Shared reply building: a YAML block for the record, the proposal set directly."""

    def reply(self, proposal: dict[str, Any], note: str) -> EngineerReply:
        body = yaml.safe_dump(proposal, sort_keys=False, allow_unicode=True) if proposal else "{}\n"
        return EngineerReply(text=f"{note}\n\n```yaml\n{body}```\n", model=self.name, proposal=proposal, calls=[])

    def summarize(self, request: DesignRequest, outcome: DesignOutcome) -> str | None:
        return factual_note(request, outcome)


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
    start: float | None = Field(None, description="the knob's value at the first design step, in its own units (default: the curriculum's start)")
    end: float | None = Field(None, description="its value at the last design step (default: the curriculum's end)")
    spread: float | None = Field(None, ge=0, le=1, description="this knob's spread over groups (default: the curriculum's spread)")


_RAMPS = "was removed: ramp any declared knob with ramps, e.g. ramps: {{hole_ratio: {{start: 0.1, end: 0.3}}}}"


class CurriculumOptions(_Options):
    _retired = retired_options(hole_start=_RAMPS, hole_end=_RAMPS, wait_start=_RAMPS, wait_end=_RAMPS)

    tilt: float = Field(1.5, ge=0, description="how strongly budget shifts toward later (harder) groups at the last round")
    knobs: list[str] | None = Field(None, description="the difficulty knobs to ramp (default: every knob the task declares harder up or down)")
    start: float = Field(0.2, ge=0, le=1, description="where a ramp starts: this far from a knob's easy bound toward its hard bound")
    end: float = Field(0.6, ge=0, le=1, description="where a ramp ends at the last round, as the same fraction")
    spread: float = Field(0.4, ge=0, le=1, description="the first group gets 1 - spread of the ramp's way from the easy bound, the last group all of it")
    ramps: dict[str, RampOptions] = Field(default_factory=dict, description="per-knob start, end and spread in the knob's own units (a knob named here is ramped)")


class CurriculumEngineer(Baseline):
    name: ClassVar[str] = "curriculum"
    description: ClassVar[str] = "hand-designed easy-to-hard schedule over rounds (ignores the evidence)"
    Options: ClassVar[type[BaseModel]] = CurriculumOptions

    def propose(self, request: DesignRequest) -> EngineerReply:
        ev = request.evidence
        o = self.options
        table = knob_table(request)
        if not table:
            return self.reply({}, "curriculum: the task declares no per-group knob table; keeping the configuration.")
        notes: list[str] = []
        default = request.generator.difficulty_knobs()
        names = o.knobs
        if names is None and o.ramps:  # the declared difficulty knobs, and any other knob given a ramp
            names = [k.name for k in default] + [n for n in o.ramps if n not in {k.name for k in default}]
        ramped = [k for k in chosen_knobs(request, names, default, notes) if k.easy_end is not None]
        share = request.generator.share_knob()
        groups = list(table)
        next_round = ev.round + 1
        progress = min(1.0, next_round / max(1, ev.rounds_total - 1))
        g = len(groups)
        weights = [math.exp(o.tilt * progress * ((i / (g - 1) if g > 1 else 0.5) - 0.5)) for i in range(g)]
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
                value = start + (end - start) * progress
                change[knob.name] = knob.snap(easy + (value - easy) * (1 - spread + spread * place))
            if change:
                update[group] = change
        note = f"curriculum: round {next_round + 1} of {ev.rounds_total}, progress {progress:.2f}" + "".join(f"; {n}" for n in notes) + "."
        return self.reply(request.generator.knob_proposal(update), note)


# -------------------------------------------------------------------- heuristic


class HeuristicOptions(_Options):
    move: float = Field(0.15, ge=0, le=1, description="share of the budget moved from strong to lagging groups each round")
    collapse: float = Field(0.05, ge=0, le=1, description="a group whose valid rate is below this has collapsed")
    backoff: float = Field(0.3, ge=0, le=1, description="a collapsed group's difficulty knobs move this share of the way to their easy bound (at least one step)")
    saturated: float = Field(0.95, ge=0, le=1, description="a group above this valid rate gets harder")
    harden: float = Field(0.05, ge=0, description="how far a saturated group's difficulty knobs move toward hard, in each knob's units (at least one step)")
    conflict_failure: str | None = Field(None, description="the failure type that calls for more practice (default: the types each knob declares it practises)")
    conflict_share: float = Field(0.5, ge=0, le=1, description="share of a group's failures above which that failure type dominates")
    wait_knob: str | None = Field(None, description="the knob raised where that failure dominates (default: every knob that declares failure types it practises)")
    wait_step: float = Field(0.1, ge=0, description="how far that knob is raised, in its units (at least one step)")
    difficulty_knobs: list[str] | None = Field(None, description="knobs that make a group harder (default: every knob the task declares harder up or down)")


class HeuristicEngineer(Baseline):
    name: ClassVar[str] = "heuristic"
    description: ClassVar[str] = "evidence-driven rules: budget to lagging groups, more practice where a failure type dominates, back off collapsed groups"
    Options: ClassVar[type[BaseModel]] = HeuristicOptions

    def propose(self, request: DesignRequest) -> EngineerReply:
        o = self.options
        generator = request.generator
        rates = group_rates(request.evidence.report)
        table = knob_table(request)
        if not table or not rates:
            return self.reply({}, "heuristic: no per-group knobs or rates; keeping the configuration.")
        groups = [g for g in table if g in rates]
        p = {g: float(rates[g].get("valid_rate", 0.0)) for g in groups}
        prev = group_rates(request.evidence.history[-1].report) if request.evidence.history else {}
        notes: list[str] = []
        difficulty = chosen_knobs(request, o.difficulty_knobs, generator.difficulty_knobs(), notes)
        practice: list[tuple[Knob, tuple[str, ...]]] = []
        for knob in chosen_knobs(request, None if o.wait_knob is None else [o.wait_knob], tuple(k for k in generator.knobs if k.practices), notes):
            failures = (o.conflict_failure,) if o.conflict_failure is not None else knob.practices
            if failures:
                practice.append((knob, failures))
        update: dict[str, dict[str, Any]] = {g: {} for g in groups}

        # Budget: from groups above the mean valid rate to lagging (not collapsed) ones.
        share = generator.share_knob()
        live = [g for g in groups if p[g] >= o.collapse]
        mean = sum(p[g] for g in live) / len(live) if live else 0.0
        need = {g: mean - p[g] for g in live if p[g] < mean}
        if share is not None and need and all(share.name in table[g] for g in groups):
            ratio = {g: float(table[g][share.name]) for g in groups}
            spare = {g: (p[g] - mean) * ratio[g] for g in groups if p[g] > mean}
            spare_total, need_total = sum(spare.values()), sum(need.values())
            if spare and spare_total > 0:
                for g, s in spare.items():
                    give = min(o.move * s / spare_total, max(0.0, ratio[g] - share.low))
                    update[g][share.name] = share.snap(ratio[g] - give)
                given = sum(ratio[g] - update[g][share.name] for g in spare)
                for g, n in need.items():
                    update[g][share.name] = share.snap(ratio[g] + given * n / need_total)
                notes.append("moved budget toward " + ", ".join(sorted(need, key=lambda g: p[g])))

        for g in groups:
            k = table[g]
            improved = g in prev and p[g] > float(prev[g].get("valid_rate", 0.0))
            if p[g] < o.collapse:
                for knob in difficulty:
                    if knob.name in k:
                        update[g][knob.name] = eased(knob, k[knob.name], o.backoff)
                notes.append(f"{g} collapsed ({p[g]:.0%}): eased")
                continue
            failures = rates[g].get("failures") or {}
            total = sum(failures.values())
            dominant = next(
                ((knob, kind) for knob, kinds in practice for kind in kinds
                 if knob.name in k and total and failures.get(kind, 0) / total >= o.conflict_share),
                None,
            )
            if dominant is not None:
                knob, kind = dominant
                update[g][knob.name] = moved(knob, k[knob.name], float(k[knob.name]) + o.wait_step)
                notes.append(f"{g}: {kind} failures dominate, more {knob.name}")
            elif p[g] > o.saturated and not improved:
                for knob in difficulty:
                    if knob.name in k:
                        update[g][knob.name] = hardened(knob, k[knob.name], o.harden)
                notes.append(f"{g} saturated: harder")
        update = {g: v for g, v in update.items() if v}
        note = "heuristic: " + ("; ".join(notes) if notes else "nothing to change") + "."
        return self.reply(generator.knob_proposal(update), note)


# ----------------------------------------------------------------- learnability


class LearnabilityOptions(_Options):
    mix: float = Field(0.8, ge=0, le=1, description="weight of the learnability allocation against the current ratios")
    epsilon: float = Field(0.01, ge=0, le=0.25, description="learnability floor so no group's weight is zero")


class LearnabilityEngineer(Baseline):
    name: ClassVar[str] = "learnability"
    description: ClassVar[str] = "budget in proportion to p(1-p): groups whose valid rate is nearest 50% (PLR / SEC style)"
    Options: ClassVar[type[BaseModel]] = LearnabilityOptions

    def propose(self, request: DesignRequest) -> EngineerReply:
        rates = group_rates(request.evidence.report)
        table = knob_table(request)
        share = request.generator.share_knob()
        if not table or not rates:
            return self.reply({}, "learnability: no per-group knobs or rates; keeping the configuration.")
        groups = [g for g in table if g in rates and share is not None and share.name in table[g]]
        if share is None or not groups:
            return self.reply({}, "learnability: the task declares no budget-share knob; keeping the configuration.")
        ratio = {g: float(table[g][share.name]) for g in groups}
        score = {g: float(rates[g].get("valid_rate", 0.0)) * (1 - float(rates[g].get("valid_rate", 0.0))) + self.options.epsilon for g in groups}
        total = sum(score.values())
        budget = sum(ratio.values())
        mix = self.options.mix
        update = {g: {share.name: share.snap((1 - mix) * ratio[g] + mix * budget * score[g] / total)} for g in groups}
        best = max(groups, key=lambda g: score[g])
        return self.reply(request.generator.knob_proposal(update), f"learnability: most budget to {best} (valid {rates[best].get('valid_rate', 0):.0%}).")


ENGINEERS = (FixedEngineer, RandomEngineer, CurriculumEngineer, HeuristicEngineer, LearnabilityEngineer)
