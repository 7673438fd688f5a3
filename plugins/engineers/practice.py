"""Baselines practitioners use: fixed-band, window, rlve (and its first port, rlve-grid-port) and learnability-shares.

Like the other baselines (:mod:`envengineer.plugins.engineers.baselines`) they know a task only by
its declaration: the groups of the knob table in the task's order (read as easy to hard), the budget
share knob, the difficulty knobs (``harder`` up or down) and each knob's bounds and step. They keep
no state between design steps: each step replays the recorded rounds (``Evidence.history``, then the
round just finished), so a resumed run, a replay (``envengineer propose``) and a fresh run decide the
same, and a run's seed decides rlve's draws.

- ``fixed-band``: shares fixed once, from the base profile, over the groups in the learnable band;
- ``window``: the frontier group and the next harder ones, advancing when the frontier passes;
- ``rlve``: RLVE's adaptive-difficulty manager (Zeng et al. 2025, arXiv 2511.07317): a ceiling level h
  on the task's declared difficulty (the groups where the task declares them its levels, grid-walk's walk
  lengths, else each group's difficulty knobs), each instance's level from [h - 3, h], h raised when the
  accuracy of the rollouts at h (each prompt once, never a prefilter's pooled with GRPO's) reaches 90%;
- ``rlve-grid-port``: the first port of that rule (on grid-walk the grid size, one level a group a round,
  every sample counted), kept so the results that cite it stay reproducible;
- ``learnability-shares``: ``learnability``'s budget rule with every difficulty knob frozen.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from envengineer.api import DesignRequest, EngineerReply, Knob
from envengineer.plugins.engineers.baselines import (
    Baseline,
    LearnabilityEngineer,
    LearnabilityOptions,
    Success,
    _Options,
    budget_note,
    chosen_knobs,
    group_cells,
    knob_groups,
    knob_table,
)
from pydantic import BaseModel, Field


@dataclass
class Recorded:
    """One finished round as a replay reads it."""

    round: int
    config: Mapping[str, Any]
    signal: Mapping[str, Any]
    report: Mapping[str, Any]


def recorded_rounds(request: DesignRequest) -> list[Recorded]:
    """Every finished round, oldest first: the history, then the round just finished."""
    ev = request.evidence
    rounds = [Recorded(r.round, r.config, r.signal or {}, r.report or {}) for r in ev.history]
    return [*rounds, Recorded(ev.round, ev.config, ev.signal or {}, ev.report or {})]


def band_shares(groups: list[str], chosen: list[str], share: Knob) -> dict[str, float]:
    """Equal shares over ``chosen``, the share knob's floor for every other group (the projection renormalises)."""
    floor = share.low
    rest = max(0.0, 1.0 - floor * (len(groups) - len(chosen)))
    return {g: share.snap(rest / len(chosen)) if g in chosen else share.snap(floor) for g in groups}


def _pct(p: float) -> str:
    return f"{p:.0%}"


# -------------------------------------------------------------------- fixed-band


class FixedBandOptions(_Options):
    low: float = Field(0.1, ge=0, le=1, description="a group is in the learnable band when its base success p is at least this")
    high: float = Field(0.9, ge=0, le=1, description="... and at most this")
    min_samples: int = Field(16, ge=1, description="a group's base p is its sampled success on round 0's training prompts when round 0's "
                             "training signal holds at least this many samples of it, else its valid rate in the base evaluation")
    cycle: list[str] = Field(default_factory=list, description="difficulty knobs swept through their values round by round, the same value in "
                             "every group (round r: the (r mod n)-th of the knob's n values from its easy bound; an integer knob's own values, "
                             "else 11 levels), so over n rounds every group trains equally at each value, e.g. [size] on grid-walk mixes the "
                             "grid sizes as its target sets do; round 0 keeps the initial config; default: no knob moves")


class FixedBandEngineer(Baseline):
    name: ClassVar[str] = "fixed-band"
    description: ClassVar[str] = ("fixed shares, chosen once from the base profile: equal over the groups whose base success is in "
                                  "[low, high], the share floor elsewhere; never changed, difficulty knobs never moved")
    Options: ClassVar[type[BaseModel]] = FixedBandOptions

    def propose(self, request: DesignRequest) -> EngineerReply:
        o = self.options
        generator = request.generator
        table = knob_table(request)
        share = generator.share_knob()
        if table and generator.knob_table is None:  # one group: no shares to fix, only the cycle
            knobs, swept, notes = self.swept(request, list(table))
            note = (f"fixed-band: {budget_note(request)}; "
                    + (f"swept for round {request.evidence.round + 1}: {', '.join(swept)}" if swept else "difficulty knobs kept (no cycle)")
                    + (f"; {'; '.join(notes)}" if notes else "") + ".")
            return self.reply(generator.knob_proposal(knobs), note)
        if not table or share is None or not all(share.name in v for v in table.values()):
            return self.reply({}, "fixed-band: the task declares no budget share in a per-group knob table; keeping the configuration.")
        groups = list(table)
        first = recorded_rounds(request)[0]  # round 0: trained on the initial config, sampled by the starting policy
        base = request.evidence.base_report or first.report
        success = Success(request, groups, o.min_samples, signal=first.signal, report=base)
        p = success.p
        band = [g for g in groups if g in p and o.low <= p[g] <= o.high]
        if band:
            why = f"base success in [{_pct(o.low)}, {_pct(o.high)}]: {', '.join(band)}"
        elif p:
            best = max((g for g in groups if g in p), key=lambda g: (p[g] * (1 - p[g]), -groups.index(g)))
            band, why = [best], f"no group's base success in [{_pct(o.low)}, {_pct(o.high)}]: the nearest to 50%, {best}"
        else:
            return self.reply({}, f"fixed-band: round {first.round} recorded no per-group success (no training signal, "
                                  "no validation rates); keeping the configuration.")
        source = success.describe() + ("; validation: the base evaluation" if request.evidence.base_report else
                                       "; validation: round 0's (no base evaluation recorded)")
        profile = ", ".join(f"{g} {success.label(g)}" for g in groups if g in p)
        shares = band_shares(groups, band, share)
        knobs, swept, notes = self.swept(request, groups)
        for g, v in shares.items():
            knobs[g][share.name] = v
        kept = (f"swept for round {request.evidence.round + 1}: {', '.join(swept)}; other difficulty knobs kept" if swept
                else "difficulty knobs kept")
        note = (f"fixed-band: the base profile ({source}): {profile}; {why}; shares fixed at "
                f"{', '.join(f'{g} {shares[g]:g}' for g in band)}, {share.low:g} elsewhere; {kept}"
                + (f"; {'; '.join(notes)}" if notes else "") + ".")
        return self.reply(generator.knob_proposal(knobs), note)

    def swept(self, request: DesignRequest, groups: list[str]) -> tuple[dict[str, dict[str, Any]], list[str], list[str]]:
        """The ``cycle`` knobs' values for the next round in every group, what was swept, and notes on knobs not swept."""
        knobs: dict[str, dict[str, Any]] = {g: {} for g in groups}
        notes: list[str] = []
        swept = []
        for knob in chosen_knobs(request, self.options.cycle, (), notes):
            if knob.easy_end is None:
                notes.append(f"{knob.name} declares no harder direction: not swept")
                continue
            values = knob_levels(knob, 11)
            value = values[(request.evidence.round + 1) % len(values)]
            for g in groups:
                knobs[g][knob.name] = value
            swept.append(f"{knob.name} {value:g} (value {(request.evidence.round + 1) % len(values) + 1} of {len(values)})")
        return knobs, swept, notes


# ------------------------------------------------------------------------ window


class WindowOptions(_Options):
    threshold: float = Field(0.8, ge=0, le=1, description="the window advances one group when the frontier group's success reaches this")
    width: int = Field(2, ge=1, description="groups trained: the frontier group and the next width - 1 harder ones (in the task's group order)")
    min_samples: int = Field(16, ge=1, description="a group's p is its sampled success on the round's training prompts when the training "
                             "signal holds at least this many samples of it, else its greedy validation valid rate")


class WindowEngineer(Baseline):
    name: ClassVar[str] = "window"
    description: ClassVar[str] = ("a moving window: equal shares on the frontier group and the next harder one (width), the floor "
                                  "elsewhere; the window advances a group when the frontier's success reaches threshold")
    Options: ClassVar[type[BaseModel]] = WindowOptions

    def frontier(self, request: DesignRequest, groups: list[str]) -> tuple[int, list[str]]:
        """The frontier's index after the round just finished, and how it got there (one line per round)."""
        o = self.options
        trace: list[str] = []
        index: int | None = None
        for rec in recorded_rounds(request):
            success = Success(request, groups, o.min_samples, signal=rec.signal, report=rec.report)
            p = success.p
            if index is None:  # round 0: the first group in order whose success is below the threshold
                index = next((i for i, g in enumerate(groups) if not (g in p and p[g] >= o.threshold)), len(groups) - 1)
                passed = [f"{g} {success.label(g)}" for g in groups[:index]]
                trace.append(f"round {rec.round}: " + (f"{', '.join(passed)} ≥ {_pct(o.threshold)}; " if passed else "")
                             + f"frontier {groups[index]}" + (f" ({success.label(groups[index])})" if groups[index] in p else " (no evidence)"))
                continue
            g = groups[index]
            if g in p and p[g] >= o.threshold and index < len(groups) - 1:
                index += 1
                trace.append(f"round {rec.round}: {g} {success.label(g)} ≥ {_pct(o.threshold)}: advanced to {groups[index]}")
            else:
                said = success.label(g) if g in p else "no evidence"
                trace.append(f"round {rec.round}: {g} {said}" + (" (the last group)" if index == len(groups) - 1 and g in p
                                                                 and p[g] >= o.threshold else f" < {_pct(o.threshold)}: stays"))
        return index or 0, trace

    def propose(self, request: DesignRequest) -> EngineerReply:
        o = self.options
        generator = request.generator
        table = knob_table(request)
        share = generator.share_knob()
        if table and generator.knob_table is None:
            return self.reply({}, f"window: {budget_note(request)}, so the window is that group and moves nowhere (window moves "
                                  "no difficulty knob); keeping the configuration.")
        if not table or share is None or not all(share.name in v for v in table.values()):
            return self.reply({}, "window: the task declares no budget share in a per-group knob table; keeping the configuration.")
        groups = list(table)
        index, trace = self.frontier(request, groups)
        window = groups[index:index + o.width]
        shares = band_shares(groups, window, share)
        note = f"window: {'; '.join(trace)}; training on {', '.join(window)} ({shares[window[0]]:g} each), {share.low:g} elsewhere."
        return self.reply(generator.knob_proposal({g: {share.name: v} for g, v in shares.items()}), note)


# -------------------------------------------------------------------------- rlve


class RlveGridPortOptions(_Options):
    window: int = Field(4, ge=1, description="levels are drawn uniformly from [h - window + 1, h] (RLVE's difficulty_sliding_window_size, 4)")
    threshold: float = Field(0.9, ge=0, le=1, description="h rises by one level when the accuracy at h reaches this "
                             "(RLVE's min_metric_to_increase_difficulty, 0.9)")
    min_samples: int = Field(128, ge=1, description="samples at level h before the accuracy is checked (RLVE: min_prompts_before_difficulty_check "
                             "8 x n_samples_per_prompt 16 = 128); the count restarts after every check")
    initial_level: int = Field(0, ge=0, description="every group's starting ceiling h (RLVE's initial_difficulty, 0: the easy bound)")
    levels: int = Field(11, ge=2, description="levels a non-integer difficulty knob's range is cut into, from its easy bound (level 0) to its "
                        "hard bound; an integer knob's levels are its own values")
    difficulty_knobs: list[str] | None = Field(None, description="knobs that make a group harder (default: every knob the task declares harder up or down)")


def knob_levels(knob: Knob, levels: int) -> list[float | int]:
    """The knob's values from level 0 (its easy bound) to its hard bound: an integer knob's own values, else ``levels`` evenly spaced."""
    easy, hard = float(knob.easy_end), float(knob.hard_end)  # type: ignore[arg-type]
    if knob.integer:
        n = round((knob.high - knob.low) / knob.step)
        return [knob.snap(easy + (hard - easy) * i / n) for i in range(n + 1)] if n else [knob.snap(easy)]
    return [knob.snap(easy + (hard - easy) * i / (levels - 1)) for i in range(levels)]


class RlveGridPortEngineer(Baseline):
    """The first port of RLVE's rule, kept so the results that cite it stay reproducible
    (docs/results-frontier.md, docs/simulated-student.md): ``rlve`` follows RLVE's manager instead.

    Each group of the knob table is an environment whose levels are its difficulty knobs' values
    (on grid-walk the grid size, not the walk length); each design step draws one level per group
    for the whole next round from [h - w + 1, h]; only the rounds a group trained at its ceiling add
    to its count, the count being every sample of the signal (the prefilter's with GRPO's)."""

    name: ClassVar[str] = "rlve-grid-port"
    description: ClassVar[str] = ("the first port of RLVE's rule (kept for the results that cite it; rlve is RLVE's manager): per group a "
                                  "ceiling level h of its difficulty knobs, one level a round drawn from [h - window + 1, h], h raised "
                                  "when the sampled accuracy (prefilter and GRPO) at h reaches threshold over min_samples")
    Options: ClassVar[type[BaseModel]] = RlveGridPortOptions

    def ladder(self, request: DesignRequest, notes: list[str]) -> dict[str, list[float | int]]:
        """``{knob: values by level}`` of the difficulty knobs used."""
        knobs = chosen_knobs(request, self.options.difficulty_knobs, request.generator.difficulty_knobs(), notes)
        return {k.name: knob_levels(k, self.options.levels) for k in knobs if k.easy_end is not None}

    @staticmethod
    def level_of(values: Mapping[str, Any], ladder: dict[str, list[float | int]], top: int) -> int | None:
        """The level whose every knob value is the group's (None: the group is at no level)."""
        names = [k for k in ladder if k in values]
        if not names:
            return None
        for level in range(top + 1):
            if all(abs(float(values[k]) - float(ladder[k][min(level, len(ladder[k]) - 1)])) <= 1e-9 for k in names):
                return level
        return None

    def ceilings(self, request: DesignRequest, groups: list[str], ladder: dict[str, list[float | int]],
                 top: int) -> tuple[dict[str, int], dict[str, list[str]]]:
        """Each group's ceiling h after the round just finished, replayed from round 0, and each group's trace."""
        o = self.options
        h = {g: min(o.initial_level, top) for g in groups}
        count = {g: [0, 0] for g in groups}  # samples, valid at h since the last check
        trace: dict[str, list[str]] = {g: [] for g in groups}
        for rec in recorded_rounds(request):
            values = knob_groups(request.generator, rec.config)
            cells = group_cells(request.generator, rec.signal)
            for g in groups:
                level = self.level_of(values.get(g) or {}, ladder, top)
                if level != h[g]:
                    continue  # trained below its ceiling (or at no level): RLVE counts only the rollouts at h
                cell = cells.get(g) or {}
                count[g][0] += int(cell.get("samples") or 0)
                count[g][1] += int(cell.get("valid") or 0)
                n, v = count[g]
                if n < o.min_samples:
                    trace[g].append(f"r{rec.round} at h={h[g]}: {n} samples < {o.min_samples}")
                    continue
                accuracy = v / n
                if accuracy >= o.threshold and h[g] < top:
                    h[g] += 1
                    trace[g].append(f"r{rec.round} at h={h[g] - 1}: {v}/{n} = {accuracy:.0%} ≥ {o.threshold:.0%}: h→{h[g]}")
                else:
                    trace[g].append(f"r{rec.round} at h={h[g]}: {v}/{n} = {accuracy:.0%}"
                                    + (" (h at the top level)" if accuracy >= o.threshold else f" < {o.threshold:.0%}"))
                count[g] = [0, 0]
        return h, trace

    def propose(self, request: DesignRequest) -> EngineerReply:
        o = self.options
        generator = request.generator
        table = knob_table(request)
        notes: list[str] = []
        ladder = self.ladder(request, notes)
        if not table or not ladder:
            return self.reply({}, "rlve-grid-port: the task declares no difficulty knob (harder up or down) in a per-group knob table; "
                                  "keeping the configuration.")
        groups = list(table)
        top = max(len(values) for values in ladder.values()) - 1
        h, trace = self.ceilings(request, groups, ladder, top)
        update: dict[str, dict[str, Any]] = {}
        said = []
        for g in groups:
            low = max(0, h[g] - o.window + 1)
            level = random.Random(f"rlve|{request.seed}|{g}").randint(low, h[g])
            update[g] = {k: values[min(level, len(values) - 1)] for k, values in ladder.items() if k in table[g]}
            knobs = ", ".join(f"{k} {v:g}" for k, v in update[g].items())
            said.append(f"{g}: {'; '.join(trace[g]) + '; ' if trace[g] else ''}h={h[g]}, window [{low}, {h[g]}], drew {level} ({knobs})")
        if not any(group_cells(generator, rec.signal) for rec in recorded_rounds(request)):
            notes.append("no training signal: the ceilings cannot rise")
        note = "rlve-grid-port: " + "; ".join([*notes, *said]) + "; shares kept."
        return self.reply(generator.knob_proposal(update), note)


class RlveOptions(_Options):
    window: int = Field(4, ge=1, description="each instance's level is drawn uniformly from [h - window + 1, h] "
                        "(RLVE's difficulty_sliding_window_size, 4)")
    threshold: float = Field(0.9, ge=0, le=1, description="h rises by one level when the accuracy of the rollouts at h reaches this "
                             "(RLVE's min_metric_to_increase_difficulty, 0.9)")
    min_samples: int = Field(128, ge=1, description="rollouts at level h (as count says) before the accuracy is checked (RLVE: "
                             "min_prompts_before_difficulty_check 8 x n_samples_per_prompt 16 = 128); the count restarts after every check")
    initial_level: int = Field(0, ge=0, description="the starting ceiling h (RLVE's initial_difficulty, 0: the easiest level)")
    axis: Literal["auto", "groups", "knobs"] = Field("auto", description="what the levels are: groups (the knob table's groups in "
                                                     "order, one environment: the task declares groups_are_levels, e.g. grid-walk's "
                                                     "walk lengths), knobs (each group an environment, its levels its difficulty knobs' "
                                                     "values), auto (groups when the task declares groups_are_levels, else knobs)")
    count: Literal["screened", "grpo"] = Field("screened", description="which rollouts at h the accuracy counts, never the two pooled: "
                                               "screened (each prompt once, by its first sampling: a prefilter's samples where it screened "
                                               "the group's prompts, the ones it dropped included, as RLVE's manager counts every group it "
                                               "generated, the ones its dynamic-sampling filter drops included; GRPO's rollouts where no "
                                               "prefilter ran), grpo (GRPO's rollouts alone: with a prefilter only the mixed prompts it "
                                               "kept, so a level solved at screening gives no count and h stalls there)")
    levels: int = Field(11, ge=2, description="knobs axis: levels a non-integer difficulty knob's range is cut into, from its easy bound "
                        "(level 0) to its hard bound; an integer knob's levels are its own values")
    difficulty_knobs: list[str] | None = Field(None, description="knobs axis: the knobs that make a group harder (default: every knob "
                                               "the task declares harder up or down)")


@dataclass
class Ceiling:
    """One RLVE environment's state, replayed: its ceiling h and the rollouts at h counted since the last check."""

    h: int
    top: int  # the highest level the declared range holds
    samples: int = 0
    right: int = 0

    def add(self, counted: tuple[int, int], trace: list[str], round: int, threshold: float, min_samples: int) -> None:
        """Count a round's rollouts at h (``counted``: rollouts, right ones), then check as RLVE's manager does:
        at ``min_samples`` or more, h += 1 when the accuracy reaches ``threshold`` (never past ``top``), and the
        statistics restart either way; h never falls."""
        self.samples += counted[0]
        self.right += counted[1]
        n, v = self.samples, self.right
        if n < min_samples:
            trace.append(f"r{round} at h={self.h}: {n} rollouts < {min_samples}")
            return
        accuracy = v / n
        if accuracy >= threshold and self.h < self.top:
            self.h += 1
            trace.append(f"r{round} at h={self.h - 1}: {v}/{n} = {_pct(accuracy)} ≥ {_pct(threshold)}: h→{self.h}")
        else:
            trace.append(f"r{round} at h={self.h}: {v}/{n} = {_pct(accuracy)}"
                         + (" (h at the top of the declared range)" if accuracy >= threshold else f" < {_pct(threshold)}"))
        self.samples = self.right = 0


class RlveEngineer(Baseline):
    """RLVE's adaptive-difficulty manager (Zeng et al. 2025, arXiv 2511.07317) on the task's declaration.

    RLVE keeps per environment a ceiling h (from ``initial_difficulty``), draws each problem's level
    uniformly from [h - w + 1, h], counts the accuracy of the rollouts at level h only, and once they
    number at least a minimum, raises h by one when the accuracy reaches the threshold and resets the
    count either way; h never falls and nothing but the environment caps it. Here:

    - ``groups`` axis (the task declares ``groups_are_levels``: grid-walk's walk lengths): the task is one
      environment whose levels are its groups in order; the level mix is the budget shares, equal over the
      window's groups, and the generator draws each instance's level (its group) from them, so a round
      mixes the levels as RLVE's per-problem draws do;
    - ``knobs`` axis (each group an environment, its level its difficulty knobs' values): a config holds one
      value per knob per group, so each design step draws the next round's level of each group (the only
      point where it must differ from RLVE: no task's config holds a mix of values within a group);

    either way the accuracy is that of the rollouts at level h, each prompt counted once: by default its first
    sampling (a prefilter's samples where one screened it, which covers the prompts it dropped as RLVE's count
    covers the groups its dynamic-sampling filter drops; GRPO's rollouts where none ran), never a prefilter's
    pooled with GRPO's; ``count: grpo`` reads GRPO's alone (the signal's ``grpo_samples``, ``grpo_right``).
    Every round counts, round 0 included. No state is kept: each design step replays the recorded rounds."""

    name: ClassVar[str] = "rlve"
    description: ClassVar[str] = ("RLVE's adaptive-difficulty manager (Zeng et al. 2025): a ceiling level h (grid-walk: the walk length), "
                                  "each instance's level drawn from [h - window + 1, h], h raised (never lowered) when the accuracy "
                                  "of the rollouts at h (each prompt once) over at least min_samples reaches threshold")
    Options: ClassVar[type[BaseModel]] = RlveOptions

    def axis(self, request: DesignRequest) -> str:
        """``groups`` or ``knobs``: the option, or (``auto``) what the task declares."""
        if self.options.axis != "auto":
            return self.options.axis
        return "groups" if getattr(request.generator, "groups_are_levels", False) else "knobs"

    def counted(self, cell: Mapping[str, Any] | None) -> tuple[int, int]:
        """(rollouts, right ones) a group's signal cell gives the count: the prefilter's samples, every sample less
        GRPO's (``count: screened``; GRPO's when the cell has no prefilter sample), or GRPO's alone (``count: grpo``)."""
        c = cell or {}
        grpo = int(c.get("grpo_samples") or 0), int(c.get("grpo_right") or 0)
        if self.options.count == "grpo":
            return grpo
        screened = int(c.get("samples") or 0) - grpo[0], max(0, int(c.get("valid") or 0) - grpo[1])
        return screened if screened[0] > 0 else grpo

    def counting(self) -> str:
        """What the note's counts are."""
        return "accuracy: GRPO's rollouts at h" if self.options.count == "grpo" else "accuracy: each prompt's first sampling at h"

    def window(self, h: int) -> tuple[int, int]:
        """The levels drawn at ceiling ``h``: [max(0, h - window + 1), h]."""
        return max(0, h - self.options.window + 1), h

    def propose(self, request: DesignRequest) -> EngineerReply:
        table = knob_table(request)
        if not table:
            return self.reply({}, "rlve: the task declares no knob; keeping the configuration.")
        rounds = recorded_rounds(request)
        notes = [] if any(self.counted(c)[0] for rec in rounds for c in group_cells(request.generator, rec.signal).values()) else [
            "no rollouts in the training signal" + (" (grpo_samples)" if self.options.count == "grpo" else "") + ": h cannot rise"]
        if self.axis(request) == "groups":
            return self.climb_groups(request, list(table), rounds, notes)
        return self.climb_knobs(request, table, rounds, notes)

    def climb_groups(self, request: DesignRequest, groups: list[str], rounds: list[Recorded], notes: list[str]) -> EngineerReply:
        """One environment, its levels the groups: h over the groups, the window's groups sharing the budget equally."""
        o = self.options
        share = request.generator.share_knob()
        if share is None or not all(share.name in v for v in knob_table(request).values()):
            return self.reply({}, "rlve (axis groups): the task declares no budget share in its knob table, so no mix of levels "
                                  "can be proposed; keeping the configuration.")
        env = Ceiling(min(o.initial_level, len(groups) - 1), len(groups) - 1)
        trace: list[str] = []
        for rec in rounds:
            env.add(self.counted(group_cells(request.generator, rec.signal).get(groups[env.h])), trace, rec.round, o.threshold, o.min_samples)
        low, high = self.window(env.h)
        chosen = groups[low:high + 1]
        shares = band_shares(groups, chosen, share)
        rest = [g for g in groups if g not in chosen]
        note = ("rlve (levels: the groups in order, " + f"{groups[0]} level 0 … {groups[-1]} level {len(groups) - 1}; {self.counting()}): "
                + "; ".join([*notes, *trace]) + f"; h={env.h} ({groups[env.h]}), levels [{low}, {high}]: "
                + ", ".join(f"{g} {shares[g]:g}" for g in chosen)
                + (f", {share.low:g} elsewhere (the share knob's floor)" if rest else "") + "; other knobs kept.")
        return self.reply(request.generator.knob_proposal({g: {share.name: v} for g, v in shares.items()}), note)

    def climb_knobs(self, request: DesignRequest, table: Mapping[str, Any], rounds: list[Recorded], notes: list[str]) -> EngineerReply:
        """Each group an environment, its levels its difficulty knobs' values (moved together); one level a group a round."""
        o = self.options
        generator = request.generator
        knobs = chosen_knobs(request, o.difficulty_knobs, generator.difficulty_knobs(), notes)
        ladder = {k.name: knob_levels(k, o.levels) for k in knobs if k.easy_end is not None}
        if not ladder:
            return self.reply({}, "rlve (axis knobs): the task declares no difficulty knob (harder up or down) in its knob table; "
                                  "keeping the configuration.")
        groups = list(table)
        top = max(len(values) for values in ladder.values()) - 1
        envs = {g: Ceiling(min(o.initial_level, top), top) for g in groups}
        trace: dict[str, list[str]] = {g: [] for g in groups}
        for rec in rounds:
            values = knob_groups(generator, rec.config)
            cells = group_cells(generator, rec.signal)
            for g in groups:
                if RlveGridPortEngineer.level_of(values.get(g) or {}, ladder, top) == envs[g].h:  # the round trained g at h
                    envs[g].add(self.counted(cells.get(g)), trace[g], rec.round, o.threshold, o.min_samples)
        update: dict[str, dict[str, Any]] = {}
        said = []
        for g in groups:
            low, high = self.window(envs[g].h)
            level = random.Random(f"rlve|{request.seed}|{g}").randint(low, high)
            update[g] = {k: values[min(level, len(values) - 1)] for k, values in ladder.items() if k in table[g]}
            knob_text = ", ".join(f"{k} {v:g}" for k, v in update[g].items())
            said.append(f"{g}: {'; '.join(trace[g]) + '; ' if trace[g] else ''}h={envs[g].h}, levels [{low}, {high}], "
                        f"drew {level} for the round ({knob_text})")
        note = (f"rlve (levels: the difficulty knobs' values, one a group a round; {self.counting()}): "
                + "; ".join([*notes, *said]) + "; shares kept.")
        return self.reply(generator.knob_proposal(update), note)


# ----------------------------------------------------------- learnability-shares


class LearnabilitySharesOptions(_Options):
    mix: float = LearnabilityOptions.model_fields["mix"]
    epsilon: float = LearnabilityOptions.model_fields["epsilon"]
    min_samples: int = LearnabilityOptions.model_fields["min_samples"]
    budget_mode: Literal["instances", "kept_prompts"] | None = LearnabilityOptions.model_fields["budget_mode"]
    min_keep: float = LearnabilityOptions.model_fields["min_keep"]


class LearnabilitySharesEngineer(Baseline):
    """``learnability``'s budget rule alone: the same shares, every difficulty knob left where it is
    (``learnability`` with ``difficulty_knobs: []``)."""

    name: ClassVar[str] = "learnability-shares"
    description: ClassVar[str] = "learnability's budget (shares in proportion to p(1-p)) with every difficulty knob frozen"
    Options: ClassVar[type[BaseModel]] = LearnabilitySharesOptions

    def propose(self, request: DesignRequest) -> EngineerReply:
        inner = LearnabilityEngineer(LearnabilityOptions(**self.options.model_dump(), difficulty_knobs=[]))
        reply = inner.propose(request)
        note = reply.text.split("\n\n```yaml", 1)[0].removeprefix("learnability: ")
        note = re.sub(r": (easier|harder) \(no difficulty knob\)", "", note)
        return self.reply(reply.proposal or {}, f"learnability-shares (difficulty knobs frozen): {note}")


ENGINEERS = (FixedBandEngineer, WindowEngineer, RlveEngineer, RlveGridPortEngineer, LearnabilitySharesEngineer)
