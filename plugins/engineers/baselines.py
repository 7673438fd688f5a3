"""Non-LLM engineers: fixed, random, curriculum, heuristic, learnability.

They answer through the same pipeline as the LLM engineers (a partial update, projected
by the task). They are task-generic where they can be: per-group valid rates come from
the report (``by[<first grouping>]``) and the budget share is the config's per-group
``ratio`` knob when the config has a field with one knob mapping per group (``sizes``
for mapf-frozenlake). Difficulty knobs default to mapf's ``hole_ratio``/``wait_ratio``
and are skipped for tasks whose config lacks them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import yaml
from pydantic import BaseModel, ConfigDict, Field

from envengineer.components import Engineer
from envengineer.design import DesignOutcome, DesignRequest, EngineerReply, factual_note


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


def knob_field(config: Mapping[str, Any], groups: list[str] | tuple[str, ...]) -> str | None:
    """The config field that holds one knob mapping per group (``sizes``), if any."""
    for key, value in config.items():
        if isinstance(value, Mapping) and value and set(map(str, value)) & set(groups) and all(isinstance(v, Mapping) for v in value.values()):
            return str(key)
    return None


def _ordered_groups(request: DesignRequest, config: Mapping[str, Any], field: str | None) -> list[str]:
    groups = list(request.generator.groups()) if hasattr(request.generator, "groups") else []
    if field:
        keys = [str(k) for k in config[field]]
        return [g for g in groups if g in keys] + [k for k in keys if k not in groups]
    return groups


class Baseline(Engineer):
    """Shared reply building: a YAML block for the record, the proposal set directly."""

    def reply(self, proposal: dict[str, Any], note: str) -> EngineerReply:
        body = yaml.safe_dump(proposal, sort_keys=False, allow_unicode=True) if proposal else "{}\n"
        return EngineerReply(text=f"{note}\n\n```yaml\n{body}```\n", model=self.name, proposal=proposal, calls=[])

    def summarize(self, request: DesignRequest, outcome: DesignOutcome) -> str | None:
        return factual_note(request, outcome)

    @staticmethod
    def current(request: DesignRequest) -> dict[str, Any]:
        config = request.current_config
        return config.model_dump() if hasattr(config, "model_dump") else dict(config or {})


def _r(value: float) -> float:
    return round(float(value), 4)


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
    description: ClassVar[str] = "a random valid config from the task's random_config each round"
    Options: ClassVar[type[BaseModel]] = RandomOptions

    def propose(self, request: DesignRequest) -> EngineerReply:
        if self.options.seed is None:
            seed = request.seed + 1
        else:
            seed = self.options.seed + request.evidence.round + 1
        config = request.generator.random_config(seed)
        return self.reply(config.model_dump(), f"random: config drawn with seed {seed}.")


# ------------------------------------------------------------------- curriculum


class CurriculumOptions(_Options):
    tilt: float = Field(1.5, ge=0, description="how strongly budget shifts toward later (harder) groups at the last round")
    hole_start: float | None = Field(0.1, ge=0, description="hole_ratio at the first round (scaled up with group index)")
    hole_end: float | None = Field(0.3, ge=0, description="hole_ratio at the last round")
    wait_start: float | None = Field(0.2, ge=0, le=1)
    wait_end: float | None = Field(0.6, ge=0, le=1)


class CurriculumEngineer(Baseline):
    name: ClassVar[str] = "curriculum"
    description: ClassVar[str] = "hand-designed easy-to-hard schedule over rounds (ignores the evidence)"
    Options: ClassVar[type[BaseModel]] = CurriculumOptions

    def propose(self, request: DesignRequest) -> EngineerReply:
        ev = request.evidence
        config = self.current(request)
        field = knob_field(config, list(request.generator.groups()))
        if field is None:
            return self.reply({}, "curriculum: the config has no per-group knobs; keeping it.")
        groups = _ordered_groups(request, config, field)
        next_round = ev.round + 1
        progress = min(1.0, next_round / max(1, ev.rounds_total - 1))
        o = self.options
        g = len(groups)
        weights = [math.exp(o.tilt * progress * ((i / (g - 1) if g > 1 else 0.5) - 0.5)) for i in range(g)]
        total = sum(weights)
        update: dict[str, dict[str, float]] = {}
        for i, (group, w) in enumerate(zip(groups, weights)):
            knobs = config[field][group]
            scale = 0.6 + 0.4 * (i / (g - 1) if g > 1 else 1.0)
            change: dict[str, float] = {}
            if "ratio" in knobs:
                change["ratio"] = _r(w / total)
            if "hole_ratio" in knobs and o.hole_start is not None and o.hole_end is not None:
                change["hole_ratio"] = _r((o.hole_start + (o.hole_end - o.hole_start) * progress) * scale)
            if "wait_ratio" in knobs and o.wait_start is not None and o.wait_end is not None:
                change["wait_ratio"] = _r(o.wait_start + (o.wait_end - o.wait_start) * progress)
            if change:
                update[group] = change
        return self.reply({field: update} if update else {}, f"curriculum: round {next_round + 1} of {ev.rounds_total}, progress {progress:.2f}.")


# -------------------------------------------------------------------- heuristic


class HeuristicOptions(_Options):
    move: float = Field(0.15, ge=0, le=1, description="share of the budget moved from strong to lagging groups each round")
    collapse: float = Field(0.05, ge=0, le=1, description="a group whose valid rate is below this has collapsed")
    backoff: float = Field(0.3, ge=0, le=1, description="relative cut of a collapsed group's difficulty knobs")
    saturated: float = Field(0.95, ge=0, le=1, description="a group above this valid rate gets harder")
    harden: float = Field(0.05, ge=0, le=1, description="absolute raise of a saturated group's difficulty knobs")
    conflict_failure: str = Field("conflict", description="failure type that calls for more coordination practice")
    conflict_share: float = Field(0.5, ge=0, le=1, description="share of a group's failures above which conflicts dominate")
    wait_knob: str = Field("wait_ratio", description="knob raised where conflicts dominate")
    wait_step: float = Field(0.1, ge=0, le=1)
    difficulty_knobs: list[str] = Field(default_factory=lambda: ["hole_ratio", "wait_ratio"], description="knobs that make a group harder")


class HeuristicEngineer(Baseline):
    name: ClassVar[str] = "heuristic"
    description: ClassVar[str] = "evidence-driven rules: budget to lagging groups, more waits where conflicts dominate, back off collapsed groups"
    Options: ClassVar[type[BaseModel]] = HeuristicOptions

    def propose(self, request: DesignRequest) -> EngineerReply:
        o = self.options
        config = self.current(request)
        rates = group_rates(request.evidence.report)
        field = knob_field(config, list(rates) or list(request.generator.groups()))
        if field is None or not rates:
            return self.reply({}, "heuristic: no per-group knobs or rates; keeping the configuration.")
        knobs = config[field]
        groups = [g for g in _ordered_groups(request, config, field) if g in rates]
        p = {g: float(rates[g].get("valid_rate", 0.0)) for g in groups}
        prev = group_rates(request.evidence.history[-1].report) if request.evidence.history else {}
        notes: list[str] = []
        update: dict[str, dict[str, float]] = {g: {} for g in groups}

        # Budget: from groups above the mean valid rate to lagging (not collapsed) ones.
        live = [g for g in groups if p[g] >= o.collapse]
        mean = sum(p[g] for g in live) / len(live) if live else 0.0
        need = {g: mean - p[g] for g in live if p[g] < mean}
        spare = {g: (p[g] - mean) * knobs[g].get("ratio", 0.0) for g in groups if p[g] > mean}
        if need and spare and all("ratio" in knobs[g] for g in groups):
            moved = o.move
            spare_total, need_total = sum(spare.values()), sum(need.values())
            for g, s in spare.items():
                give = min(moved * s / spare_total, max(0.0, knobs[g]["ratio"] - 0.02))
                update[g]["ratio"] = _r(knobs[g]["ratio"] - give)
            given = sum(knobs[g]["ratio"] - update[g]["ratio"] for g in spare)
            for g, n in need.items():
                update[g]["ratio"] = _r(knobs[g]["ratio"] + given * n / need_total)
            notes.append("moved budget toward " + ", ".join(sorted(need, key=lambda g: p[g])))

        for g in groups:
            k = knobs[g]
            improved = g in prev and p[g] > float(prev[g].get("valid_rate", 0.0))
            if p[g] < o.collapse:
                for name in o.difficulty_knobs:
                    if isinstance(k.get(name), (int, float)):
                        update[g][name] = _r(k[name] * (1 - o.backoff))
                notes.append(f"{g} collapsed ({p[g]:.0%}): eased")
                continue
            failures = rates[g].get("failures") or {}
            total = sum(failures.values())
            if total and failures.get(o.conflict_failure, 0) / total >= o.conflict_share and isinstance(k.get(o.wait_knob), (int, float)):
                update[g][o.wait_knob] = _r(min(1.0, k[o.wait_knob] + o.wait_step))
                notes.append(f"{g}: conflicts dominate, more {o.wait_knob}")
            elif p[g] > o.saturated and not improved:
                for name in o.difficulty_knobs:
                    if isinstance(k.get(name), (int, float)):
                        update[g][name] = _r(k[name] + o.harden)
                notes.append(f"{g} saturated: harder")
        update = {g: v for g, v in update.items() if v}
        note = "heuristic: " + ("; ".join(notes) if notes else "nothing to change") + "."
        return self.reply({field: update} if update else {}, note)


# ----------------------------------------------------------------- learnability


class LearnabilityOptions(_Options):
    mix: float = Field(0.8, ge=0, le=1, description="weight of the learnability allocation against the current ratios")
    epsilon: float = Field(0.01, ge=0, le=0.25, description="learnability floor so no group's weight is zero")


class LearnabilityEngineer(Baseline):
    name: ClassVar[str] = "learnability"
    description: ClassVar[str] = "budget in proportion to p(1-p): groups whose valid rate is nearest 50% (PLR / SEC style)"
    Options: ClassVar[type[BaseModel]] = LearnabilityOptions

    def propose(self, request: DesignRequest) -> EngineerReply:
        config = self.current(request)
        rates = group_rates(request.evidence.report)
        field = knob_field(config, list(rates) or list(request.generator.groups()))
        if field is None or not rates:
            return self.reply({}, "learnability: no per-group knobs or rates; keeping the configuration.")
        knobs = config[field]
        groups = [g for g in _ordered_groups(request, config, field) if g in rates and "ratio" in knobs[g]]
        if not groups:
            return self.reply({}, "learnability: no ratio knob; keeping the configuration.")
        score = {g: float(rates[g].get("valid_rate", 0.0)) * (1 - float(rates[g].get("valid_rate", 0.0))) + self.options.epsilon for g in groups}
        total = sum(score.values())
        share = sum(knobs[g]["ratio"] for g in groups)
        mix = self.options.mix
        update = {g: {"ratio": _r((1 - mix) * knobs[g]["ratio"] + mix * share * score[g] / total)} for g in groups}
        best = max(groups, key=lambda g: score[g])
        return self.reply({field: update}, f"learnability: most budget to {best} (valid {rates[best].get('valid_rate', 0):.0%}).")


ENGINEERS = (FixedEngineer, RandomEngineer, CurriculumEngineer, HeuristicEngineer, LearnabilityEngineer)
