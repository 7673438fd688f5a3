"""The practitioners' baselines (plugins/engineers/practice.py) on hand-made evidence: fixed-band's
rule on a constructed base profile, window's advances on a hand-made sequence of rounds, rlve's
ceilings and level mixes against a hand-computed trace of RLVE's manager (and the first port's, kept as
rlve-grid-port), learnability-shares against learnability. Each design step
replays the recorded rounds, so every test builds a history and checks what the engineer proposes
after each round."""

from __future__ import annotations

import json

import pytest
from envengineer.design.step import design
from envengineer.errors import ConfigError
from envengineer.design.evidence import Evidence, RoundRecord, load_evidence
from envengineer.plugins.engineers.practice import knob_levels
from envengineer.design.prompts import build_request
from envengineer.loop.signal import Cell

WALKS = ("k3", "k4", "k5", "k6", "k7", "k8", "k9", "k10")
FLOOR = 0.01  # grid-walk's ratio floor


def cell(p: float, prompts: int = 25, k: int = 8) -> dict:
    """A signal cell of ``prompts`` prompts with ``k`` samples each and sampled success ``p``."""
    valid = round(p * prompts * k)
    c = Cell()
    for n in range(prompts):
        v = min(k, valid)
        valid -= v
        c.add({"id": str(n), "samples": k, "valid": v, "score": v / k, "kept": 0 < v < k, "groups": []})
    return c.to_dict()


def signal_of(cells: dict[str, dict], grouping: str = "moves") -> dict:
    return {"overall": {}, "by": {grouping: cells}} if cells else {}


def report_of(rates: dict[str, float], grouping: str = "moves", n: int = 40) -> dict:
    by = {g: {"n": n, "valid": round(r * n), "valid_rate": round(r * n) / n, "failures": {}} for g, r in rates.items()}
    return {"overall": {"n": n * len(by)}, "by": {grouping: by}} if by else {}


@pytest.fixture
def walk(registry):
    return registry.create("generator", "grid-walk", {}, where="task")


@pytest.fixture
def mapf(registry):
    return registry.create("generator", "mapf-frozenlake", {}, where="task")


class Rounds:
    """A run's recorded rounds, built one at a time: each round's config is the engineer's last proposal."""

    def __init__(self, registry, generator, engineer, *, rounds_total=8, base_report=None, seed=0):
        self.registry, self.generator, self.engineer = registry, generator, engineer
        self.rounds_total, self.base_report, self.seed = rounds_total, base_report or {}, seed
        self.history: list[RoundRecord] = []
        self.config = generator.default_config()
        self.outcomes = []

    def finish(self, signal: dict, report: dict | None = None):
        """Round ``len(history)`` finished on the current config with this evidence: design the next config."""
        n = len(self.history)
        evidence = Evidence(task=self.generator, round=n, rounds_total=self.rounds_total, config=self.config.model_dump(),
                            report=report or {}, history=list(self.history), signal=signal, base_report=self.base_report)
        request = build_request(evidence, self.registry, {"modules": ["F"]}, seed=self.seed + n)
        outcome = design(self.engineer, request)
        assert not outcome.fallback, outcome.reason
        self.history.append(RoundRecord(round=n, config=self.config.model_dump(), report=report or {}, signal=signal))
        self.config = outcome.config
        self.outcomes.append(outcome)
        return outcome

    @property
    def note(self) -> str:
        return self.outcomes[-1].replies[-1].text

    def shares(self) -> dict[str, float]:
        return {g: v["ratio"] for g, v in self.generator.knob_values(self.config).items()}

    def sizes(self) -> dict[str, int]:
        return {g: v["size"] for g, v in self.generator.knob_values(self.config).items()}


# -------------------------------------------------------------------- fixed-band


BASE_P = dict(zip(WALKS, (1.0, 0.97, 0.65, 0.15, 0.04, 0.0, 0.0, 0.0)))  # the frontier's warm start, roughly


def test_fixed_band_puts_equal_shares_on_the_groups_the_base_leaves_in_the_band(registry, walk):
    runs = Rounds(registry, walk, registry.create("engineer", "fixed-band"))
    runs.finish(signal_of({g: cell(p) for g, p in BASE_P.items()}))
    want = {g: 0.47 if g in ("k5", "k6") else FLOOR for g in WALKS}  # (1 - 6 x 0.01) / 2 on k5 (65%) and k6 (15%)
    assert runs.shares() == pytest.approx(want)
    assert runs.sizes() == {g: 5 for g in WALKS}  # difficulty never moved
    assert "base success in [10%, 90%]: k5, k6" in runs.note
    # later rounds say something else; the shares stay where round 0's profile put them
    for p in (0.9, 0.95):
        runs.finish(signal_of({g: cell(p if g in ("k5", "k6") else 0.5, prompts=50) for g in WALKS}))
        assert runs.shares() == pytest.approx(want)
        assert runs.sizes() == {g: 5 for g in WALKS}


def test_fixed_band_follows_its_band_options(registry, walk):
    runs = Rounds(registry, walk, registry.create("engineer", "fixed-band", {"low": 0.5, "high": 0.98}))
    runs.finish(signal_of({g: cell(p) for g, p in BASE_P.items()}))
    assert runs.shares() == pytest.approx({g: 0.47 if g in ("k4", "k5") else FLOOR for g in WALKS})


def test_fixed_band_falls_back_to_the_base_evaluation_per_group(registry, walk):
    cells = {g: cell(p) for g, p in BASE_P.items()}
    cells["k7"] = cell(0.0, prompts=1)  # 8 samples < 16: k7's base valid rate decides
    base = report_of({"k3": 1.0, "k4": 1.0, "k5": 0.6, "k6": 0.2, "k7": 0.4, "k8": 0.0})
    runs = Rounds(registry, walk, registry.create("engineer", "fixed-band"), base_report=base)
    runs.finish(signal_of(cells), report=report_of({g: 0.0 for g in WALKS[:6]}))  # round 0's own validation is not read
    assert runs.shares() == pytest.approx({g: 0.3167 if g in ("k5", "k6", "k7") else FLOOR for g in WALKS}, abs=1e-4)
    assert "validation rate for k7 (8 samples < min_samples 16)" in runs.note and "the base evaluation" in runs.note


def test_fixed_band_without_a_group_in_band_takes_the_one_nearest_half(registry, walk):
    p = dict(zip(WALKS, (1.0, 1.0, 0.95, 0.08, 0.0, 0.0, 0.0, 0.0)))
    runs = Rounds(registry, walk, registry.create("engineer", "fixed-band"))
    runs.finish(signal_of({g: cell(v) for g, v in p.items()}))
    assert runs.shares() == pytest.approx({g: 0.93 if g == "k6" else FLOOR for g in WALKS})  # 8% (1 - p) 0.074 > 95%'s 0.048
    assert "nearest to 50%, k6" in runs.note


def test_fixed_band_cycle_sweeps_a_difficulty_knob_round_by_round(registry, walk):
    runs = Rounds(registry, walk, registry.create("engineer", "fixed-band", {"cycle": ["size", "nope"]}))
    want = {g: 0.47 if g in ("k5", "k6") else FLOOR for g in WALKS}
    sizes = []
    for _ in range(7):
        runs.finish(signal_of({g: cell(p) for g, p in BASE_P.items()}))
        assert runs.shares() == pytest.approx(want)  # the band never moves
        assert len(set(runs.sizes().values())) == 1  # every group at the same size
        sizes.append(runs.sizes()["k5"])
    # round r trains at the (r mod 5)-th size from the easy end: rounds 1..7 at 4 5 6 7 3 4 5 (round 0: the initial 5)
    assert sizes == [4, 5, 6, 7, 3, 4, 5]
    assert "swept for round 7: size 5 (value 3 of 5)" in runs.note and "ignored nope" in runs.note


def test_fixed_band_on_another_task_reads_only_the_declaration(registry, mapf):
    sizes = ("3x3", "4x4", "5x5", "6x6", "7x7", "8x8", "9x9", "10x10")
    runs = Rounds(registry, mapf, registry.create("engineer", "fixed-band"))
    runs.finish(signal_of({g: cell(p) for g, p in zip(sizes, (0.93, 0.55, 0.3, 0.02, 0, 0, 0, 0))}, grouping="size"))
    shares = {g: v["ratio"] for g, v in mapf.knob_values(runs.config).items()}
    assert shares == pytest.approx({g: 0.44 if g in ("4x4", "5x5") else 0.02 for g in sizes})  # (1 - 6 x 0.02) / 2: mapf's floor is 0.02


# ------------------------------------------------------------------------ window


def test_window_advances_when_the_frontier_passes_the_threshold(registry, walk):
    runs = Rounds(registry, walk, registry.create("engineer", "window"))

    def window():
        return [g for g, s in runs.shares().items() if s > FLOOR + 1e-9]

    # round 0 (uniform): k3 and k4 pass 80%, k5 does not: the frontier is k5
    runs.finish(signal_of({g: cell(p) for g, p in zip(WALKS, (0.95, 0.85, 0.5, 0.2, 0.05, 0, 0, 0))}))
    assert window() == ["k5", "k6"] and runs.shares()["k5"] == pytest.approx(0.47)
    # round 1: k5 at 70%: stays
    runs.finish(signal_of({"k5": cell(0.7, prompts=100), "k6": cell(0.3, prompts=100)}))
    assert window() == ["k5", "k6"] and "k5 sampled 70% < 80%: stays" in runs.note
    # round 2: k5 at 82%: one group on (k6 is already past 80% too: still one group a round)
    runs.finish(signal_of({"k5": cell(0.82, prompts=100), "k6": cell(0.85, prompts=100)}))
    assert window() == ["k6", "k7"] and "k5 sampled 82% ≥ 80%: advanced to k6" in runs.note
    # round 3: only the frontier's p counts: k7 at 95% does not move the window
    runs.finish(signal_of({"k6": cell(0.6, prompts=100), "k7": cell(0.95, prompts=100)}))
    assert window() == ["k6", "k7"]
    # a group with too few samples falls back to its validation rate
    runs.finish(signal_of({"k6": cell(1.0, prompts=1)}), report=report_of({"k6": 0.9}))
    assert window() == ["k7", "k8"]
    assert all(size == 5 for size in runs.sizes().values())


def test_window_width_threshold_and_the_last_group(registry, walk):
    runs = Rounds(registry, walk, registry.create("engineer", "window", {"threshold": 0.6, "width": 3}))
    runs.finish(signal_of({g: cell(p) for g, p in zip(WALKS, (0.95, 0.85, 0.65, 0.62, 0.61, 0.7, 0.9, 0.5))}))
    assert [g for g, s in runs.shares().items() if s > FLOOR + 1e-9] == ["k10"]  # every group but k10 passes 60%
    assert runs.shares()["k10"] == pytest.approx(0.93)
    runs.finish(signal_of({"k10": cell(0.99, prompts=100)}))  # the last group passes: nowhere further to go
    assert runs.shares()["k10"] == pytest.approx(0.93) and "the last group" in runs.note
    again = Rounds(registry, walk, registry.create("engineer", "window", {"width": 3}))
    again.finish(signal_of({g: cell(p) for g, p in zip(WALKS, (0.95, 0.5, 0, 0, 0, 0, 0, 0))}))
    assert again.shares() == pytest.approx({g: 0.3167 if g in ("k4", "k5", "k6") else FLOOR for g in WALKS}, abs=2e-4)  # (1 - 5 x 0.01) / 3


def test_window_options_are_checked(registry):
    with pytest.raises(ConfigError):
        registry.create("engineer", "window", {"width": 0})
    with pytest.raises(ConfigError):
        registry.create("engineer", "rlve", {"windw": 2})


# ------------------------------------------------ rlve-grid-port (the first port, kept for its results)


def test_rlve_grid_port_levels_span_each_knob_from_easy_to_hard(walk, mapf):
    assert knob_levels(walk.knob("size"), 11) == [3, 4, 5, 6, 7]  # an integer knob: its own values
    holes = knob_levels(mapf.knob("hole_ratio"), 11)
    assert len(holes) == 11 and holes[0] == 0.0 and holes[-1] == mapf.knob("hole_ratio").high
    assert holes == sorted(holes)


def test_rlve_grid_port_ceiling_against_a_hand_computed_trace(registry, walk):
    """window 1 (every round at its ceiling h), threshold 0.9, 128 samples: k5 gets 100 samples a round.

    round  k5 size (level)  k5 valid/samples  count since check  check                    h after
    0      5 (2)            -                 -                  level 2 != h 0: ignored  0
    1      3 (0)            95/100            100                < 128: none              0
    2      3 (0)            80/100            175/200 = 87.5%    < 90%: reset             0
    3      3 (0)            95/100            100                none                     0
    4      3 (0)            92/100            187/200 = 93.5%    >= 90%: h -> 1           1
    5      4 (1)            190/200           190/200 = 95%      >= 90%: h -> 2           2
    6      5 (2)
    k6 never gets a valid sample: it stays at level 0 (size 3); groups without samples too."""
    runs = Rounds(registry, walk, registry.create("engineer", "rlve-grid-port", {"window": 1}))
    k5 = [None, (95, 100), (80, 100), (95, 100), (92, 100), (190, 200)]
    sizes = [runs.sizes()["k5"]]
    for n, counts in enumerate(k5):
        cells = {"k6": cell(0.0, prompts=20)}
        if counts is not None:
            valid, samples = counts
            cells["k5"] = cell(valid / samples, prompts=samples // 4, k=4)
        else:
            cells["k5"] = cell(1.0, prompts=50, k=4)  # round 0 at size 5: perfect, and not at the ceiling
        runs.finish(signal_of(cells))
        sizes.append(runs.sizes()["k5"])
        assert runs.sizes()["k6"] == 3 and runs.sizes()["k9"] == 3
        assert runs.shares() == pytest.approx({g: 0.125 for g in WALKS})  # shares kept
    assert sizes == [5, 3, 3, 3, 3, 4, 5]
    note = runs.note
    assert "r2 at h=0: 175/200 = 88% < 90%" in note and "r4 at h=0: 187/200 = 94% ≥ 90%: h→1" in note
    assert "r5 at h=1: 190/200 = 95% ≥ 90%: h→2" in note and "r1 at h=0: 100 samples < 128" in note


def test_rlve_grid_port_draws_from_the_window_and_counts_only_the_ceiling(registry, walk):
    """The paper's defaults (window 4): each round's level lies in [max(0, h - 3), h]; a round below h,
    however well it went, never raises h, and every round at h with 200 samples at 95% raises it."""
    engineer = registry.create("engineer", "rlve-grid-port")
    runs = Rounds(registry, walk, engineer, rounds_total=20)
    h, levels = 0, []
    level = None  # round 0 is at the config's size 5, not at a level the engineer drew
    for _ in range(14):
        p = 0.95 if level == h else 1.0  # below the ceiling: perfect, and ignored
        runs.finish(signal_of({"k5": cell(p, prompts=50, k=4)}))
        if level == h:
            h = min(h + 1, 4)
        level = runs.sizes()["k5"] - 3
        levels.append(level)
        assert max(0, h - 3) <= level <= h, (h, level, runs.note)
    assert h >= 2 and len(set(levels)) >= 3
    # the draws are the run's: the same seed draws the same levels, another seed others
    again = Rounds(registry, walk, registry.create("engineer", "rlve-grid-port"), rounds_total=20)
    other = Rounds(registry, walk, registry.create("engineer", "rlve-grid-port"), rounds_total=20, seed=7)
    for r in runs.history:
        again.finish(r.signal)
        other.finish(r.signal)
    assert again.history[1:] and [x.config for x in again.history] == [x.config for x in runs.history]
    assert [x.config for x in other.history] != [x.config for x in runs.history]


def test_rlve_grid_port_moves_every_difficulty_knob_of_a_group_together(registry, mapf):
    runs = Rounds(registry, mapf, registry.create("engineer", "rlve-grid-port", {"window": 1, "min_samples": 16}))
    runs.finish({})  # no signal: nothing rises, every group goes to level 0
    assert all(v["hole_ratio"] == 0.0 and v["wait_ratio"] == 0.0 for v in mapf.knob_values(runs.config).values())
    assert "no training signal" in runs.note
    runs.finish(signal_of({"4x4": cell(0.95)}, grouping="size"))
    values = mapf.knob_values(runs.config)
    hole, wait = mapf.knob("hole_ratio"), mapf.knob("wait_ratio")
    assert values["4x4"]["hole_ratio"] == knob_levels(hole, 11)[1] and values["4x4"]["wait_ratio"] == knob_levels(wait, 11)[1]
    assert values["5x5"]["hole_ratio"] == 0.0


# -------------------------------------------------------------------------- rlve


def rlve_cell(screened: tuple[int, int] = (0, 0), grpo: tuple[int, int] = (0, 0), k: int = 8) -> dict:
    """A signal cell: a prefilter's ``screened`` = (right, samples), on prompts GRPO may or may not train on,
    and ``grpo`` = (right, rollouts) of GRPO's rollouts in groups of ``k``."""
    c = Cell()
    right, rollouts = grpo
    for n in range(rollouts // k):
        v = min(k, right)
        right -= v
        c.add({"id": f"g{n}", "samples": k, "valid": v, "score": v / k, "kept": True, "groups": [[1.0] * v + [0.0] * (k - v)]})
    if screened[1]:
        c.add({"id": "screened", "samples": screened[1], "valid": screened[0], "score": screened[0] / screened[1], "kept": False, "groups": []})
    return c.to_dict()


def window_shares(low: int, high: int) -> dict[str, float]:
    """grid-walk's shares for the levels [low, high]: equal on k(3+low) … k(3+high), the floor elsewhere."""
    chosen = WALKS[low:high + 1]
    return {g: (1 - FLOOR * (len(WALKS) - len(chosen))) / len(chosen) if g in chosen else FLOOR for g in WALKS}


def test_rlve_follows_rlves_manager_on_a_hand_computed_trace(registry, walk):
    """RLVE's defaults (window 4, threshold 0.9, 128 rollouts) on grid-walk, whose levels are its walk lengths
    (k3 level 0 … k10 level 7). Each prompt at level h counts once, by its first sampling (here a prefilter's:
    "screened"); GRPO's rollouts on the prompts it kept are never pooled with it; every round counts, round 0 too.

    round  config    screened at h (GRPO at h)          count since check  check                          h after
    0      uniform   k3 120/128 (GRPO 10/32)            120/128 = 93.8%    >= 90%: h -> 1 (pooled: 81%)   1
    1      [0, 1]    k4 100/112 (k3 0/96: below h)      100/112            112 < 128: none                1
    2      [0, 1]    k4 32/32                           132/144 = 91.7%    >= 90%: h -> 2                 2
    3      [0, 2]    k5 110/128 (k6 16/16: above h)     110/128 = 85.9%    < 90%: reset, h stays          2
    4      [0, 2]    k5 124/128                         124/128 = 96.9%    >= 90%: h -> 3                 3
    5      [0, 3]    k6 128/128 (GRPO none: all right)  128/128 = 100%     >= 90%: h -> 4                 4
    6      [1, 4]    k7 10/128                          10/128 = 7.8%      < 90%: reset, never lowered    4
    the level mix after each: the window's walk lengths share the budget equally, the others keep the floor
    0.01 (after round 6: k4-k7 0.24 each); every grid size stays 5."""
    runs = Rounds(registry, walk, registry.create("engineer", "rlve"), rounds_total=10)
    trace = [
        {"k3": rlve_cell((120, 128), (10, 32)), **{g: rlve_cell((0, 32)) for g in WALKS[1:]}},
        {"k4": rlve_cell((100, 112)), "k3": rlve_cell((0, 96))},
        {"k4": rlve_cell((32, 32))},
        {"k5": rlve_cell((110, 128)), "k6": rlve_cell((16, 16))},
        {"k5": rlve_cell((124, 128))},
        {"k6": rlve_cell((128, 128))},
        {"k7": rlve_cell((10, 128)), "k3": rlve_cell((128, 128))},
    ]
    ceilings = [1, 1, 2, 2, 3, 4, 4]
    for cells, h in zip(trace, ceilings):
        runs.finish(signal_of(cells))
        assert runs.shares() == pytest.approx(window_shares(max(0, h - 3), h), abs=2e-4), (h, runs.note)
        assert runs.sizes() == {g: 5 for g in WALKS}  # the grid size is no level: it never moves
        assert f"h={h} ({WALKS[h]}), levels [{max(0, h - 3)}, {h}]" in runs.note
    note = runs.note
    assert "accuracy: each prompt's first sampling at h" in note
    assert "r0 at h=0: 120/128 = 94% ≥ 90%: h→1" in note and "r1 at h=1: 112 rollouts < 128" in note
    assert "r2 at h=1: 132/144 = 92% ≥ 90%: h→2" in note and "r3 at h=2: 110/128 = 86% < 90%" in note
    assert "r5 at h=3: 128/128 = 100% ≥ 90%: h→4" in note and "r6 at h=4: 10/128 = 8% < 90%" in note
    assert "k4 0.24, k5 0.24, k6 0.24, k7 0.24, 0.01 elsewhere" in note


def test_rlve_count_grpo_reads_grpos_rollouts_alone(registry, walk):
    """count: grpo counts GRPO's rollouts only: with a prefilter, a level solved at screening (no prompt kept)
    gives it nothing to count, so h stalls where RLVE's count (every group generated) would raise it."""
    signal = signal_of({"k3": rlve_cell((120, 128), (0, 64))})
    first = Rounds(registry, walk, registry.create("engineer", "rlve"))
    grpo = Rounds(registry, walk, registry.create("engineer", "rlve", {"count": "grpo"}))
    first.finish(signal)
    grpo.finish(signal)
    assert "r0 at h=0: 120/128 = 94% ≥ 90%: h→1" in first.note and first.shares() == pytest.approx(window_shares(0, 1), abs=2e-4)
    assert "r0 at h=0: 64 rollouts < 128" in grpo.note and "accuracy: GRPO's rollouts at h" in grpo.note
    assert grpo.shares()["k3"] == pytest.approx(0.93)
    grpo.finish(signal_of({"k3": rlve_cell((128, 128))}))  # all right at screening: nothing kept, nothing counted
    assert "r1 at h=0: 64 rollouts < 128" in grpo.note and grpo.shares()["k3"] == pytest.approx(0.93)


def test_rlve_climbs_the_walk_length_to_the_declared_range_not_the_grid_size(registry, walk):
    """On grid-walk the levels are the walk lengths: h passes the grid size's five values (the first port's
    cap) up to k10, the last group, and stays there; rlve-grid-port on the same evidence moves the grid size.
    No prefilter here: GRPO's rollouts are each prompt's first sampling."""
    runs = Rounds(registry, walk, registry.create("engineer", "rlve", {"min_samples": 16}), rounds_total=12)
    port = Rounds(registry, walk, registry.create("engineer", "rlve-grid-port", {"min_samples": 16, "window": 1}), rounds_total=12)
    for h in range(9):
        level = min(h, 7)
        runs.finish(signal_of({WALKS[level]: rlve_cell(grpo=(16, 16))}))
        assert runs.shares() == pytest.approx(window_shares(max(0, min(h + 1, 7) - 3), min(h + 1, 7)), abs=2e-4)
        assert runs.sizes() == {g: 5 for g in WALKS}
    assert "h at the top of the declared range" in runs.note and "h=7 (k10), levels [4, 7]" in runs.note
    for r in runs.history:
        port.finish(r.signal)
    assert set(port.sizes().values()) != {5} and port.shares() == pytest.approx({g: 0.125 for g in WALKS})


def test_rlve_on_knobs_counts_each_group_at_its_h_and_never_lowers_it(registry, mapf, walk):
    """Where each group is an environment (mapf-frozenlake: its difficulty knobs hole_ratio and wait_ratio move
    together), each group climbs its own h; the prefilter's count is never pooled with GRPO's; a failing check
    resets the count and leaves h where it is. axis: knobs on grid-walk puts the grid size back as the level."""
    runs = Rounds(registry, mapf, registry.create("engineer", "rlve", {"window": 1, "min_samples": 16}))
    hole = knob_levels(mapf.knob("hole_ratio"), 11)
    runs.finish({})  # no signal: every group goes to level 0
    assert all(v["hole_ratio"] == 0.0 for v in mapf.knob_values(runs.config).values()) and "h cannot rise" in runs.note
    # 4x4: 16/16 GRPO, no prefilter; 5x5: screened 12/16 = 75% (pooled with GRPO's 32/32: 44/48 = 92%, a rise)
    runs.finish(signal_of({"4x4": rlve_cell(grpo=(16, 16)), "5x5": rlve_cell((12, 16), (32, 32))}, grouping="size"))
    values = mapf.knob_values(runs.config)
    assert values["4x4"]["hole_ratio"] == hole[1] and values["5x5"]["hole_ratio"] == 0.0
    runs.finish(signal_of({"4x4": rlve_cell(grpo=(0, 16))}, grouping="size"))  # 0% at h = 1: reset, h stays 1
    assert mapf.knob_values(runs.config)["4x4"]["hole_ratio"] == hole[1]
    assert "4x4: r1 at h=0: 16/16 = 100% ≥ 90%: h→1; r2 at h=1: 0/16 = 0% < 90%; h=1" in runs.note
    assert "5x5: r1 at h=0: 12/16 = 75% < 90%" in runs.note
    sized = Rounds(registry, walk, registry.create("engineer", "rlve", {"axis": "knobs", "window": 1, "min_samples": 16}))
    sized.finish(signal_of({"k5": rlve_cell(grpo=(16, 16))}))
    assert sized.sizes()["k5"] == 3  # round 0 at size 5 is above h = 0: not counted, as RLVE never samples above h
    sized.finish(signal_of({"k5": rlve_cell(grpo=(16, 16))}))
    assert sized.sizes()["k5"] == 4 and sized.shares() == pytest.approx({g: 0.125 for g in WALKS})


def test_rlve_options_are_checked(registry):
    with pytest.raises(ConfigError, match="axis"):
        registry.create("engineer", "rlve", {"axis": "sizes"})
    with pytest.raises(ConfigError, match="min_samples"):
        registry.create("engineer", "rlve", {"min_samples": 0})
    with pytest.raises(ConfigError, match="count"):
        registry.create("engineer", "rlve", {"count": "all"})


# ----------------------------------------------------------- learnability-shares


def test_learnability_shares_is_learnability_with_difficulty_frozen(registry, walk):
    cells = {g: cell(p) for g, p in BASE_P.items()}
    shares_only = Rounds(registry, walk, registry.create("engineer", "learnability-shares"))
    frozen = Rounds(registry, walk, registry.create("engineer", "learnability", {"difficulty_knobs": []}))
    full = Rounds(registry, walk, registry.create("engineer", "learnability"))
    for runs in (shares_only, frozen, full):
        runs.finish(signal_of(cells))
    assert shares_only.config == frozen.config
    assert shares_only.sizes() == {g: 5 for g in WALKS}  # the full one moves sizes: k3 harder, k7 easier
    assert full.sizes()["k3"] > 5 and full.sizes()["k7"] < 5
    assert shares_only.shares() == pytest.approx(full.shares())  # the same budget rule
    assert "difficulty knobs frozen" in shares_only.note and "easier" not in shares_only.note


# ------------------------------------------------------------------- evidence


def test_load_evidence_reads_the_base_evaluation(registry, recorded_run, report_factory):
    assert load_evidence(recorded_run, 1, registry).base_report == {}
    base = report_factory({"3x3": 0.5, "4x4": 0.25})
    (recorded_run / "base" / "eval").mkdir(parents=True)
    (recorded_run / "base" / "eval" / "summary.json").write_text(json.dumps(base))
    assert load_evidence(recorded_run, 1, registry).base_report == base
