"""Issue 43, point 3: every rule engineer works on a task without groups, and point 2: learnability
allocates kept prompts at kept-prompt budgets.

A task without a knob table (its declared knobs are top-level fields: a verifiers taskset without
``groups``, tests/vf_tasksets/vf_toy_sums) is one group, ``all``, read from the signal's and the
report's overall cells. Each engineer gets evidence crafted so its rule must move a difficulty knob
one known way, on the verifiers taskset and on the arith example (examples/envengineer-arith): per
group on its knob table, and on a flat variant of it (the same knob at the config's top level, arith's
groupings kept), which must move exactly as one group of the table does on the same evidence.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from envengineer.design.evidence import Evidence, RoundRecord
from envengineer.design.prompts import build_request
from envengineer.design.step import design
from envengineer.plugins.engineers.baselines import WHOLE, group_cells, knob_groups, learnability_weights
from envengineer.registry import Registry

FIXTURES = Path(__file__).resolve().parent / "vf_tasksets"
#: vf-toy-sums without groups: num_terms 2-6 (default 2) and max_operand 1-99 (default 9), both harder up.
SUMS = {
    "taskset": "vf-toy-sums", "seed_field": "seed", "size_field": "num_tasks", "answer_field": "answer",
    "knobs": {"num_terms": {"harder": "up"}, "max_operand": {"range": [1, 99], "harder": "up"}},
}
needs_verifiers = pytest.mark.skipif(sys.version_info < (3, 11), reason="verifiers needs Python >= 3.11")


def cell(p: float, samples: int = 400, mixed: float | None = None) -> dict[str, Any]:
    """A signal cell: ``samples`` samples at sampled success ``p``, ``mixed`` of its prompts mixed (default: 0 at p 0 or 1, else 0.5)."""
    if mixed is None:
        mixed = 0.0 if p in (0.0, 1.0) else 0.5
    return {"prompts": samples // 8, "samples": samples, "valid": round(p * samples), "success": p, "mixed_share": mixed}


def signal(cells: dict[str, dict[str, Any]] | None = None, overall: dict[str, Any] | None = None, grouping: str = "group") -> dict[str, Any]:
    return {"overall": overall or {}, "by": {grouping: cells} if cells else {}}


def report(rate: float, n: int = 60) -> dict[str, Any]:
    rates = {"n": n, "valid": round(rate * n), "valid_rate": rate, "failures": {}}
    return {"overall": rates, "by": {"group": {WHOLE: rates}}}


def step(registry, generator, engineer, config, sig, *, rep=None, round=0, rounds_total=4, history=(), training=None):
    """One design step of ``engineer`` on this evidence; the outcome (its reply's proposal and note, the projected config)."""
    evidence = Evidence(task=generator, round=round, rounds_total=rounds_total, config=config.model_dump(),
                        report=rep or {}, history=list(history), signal=sig, training=training or {})
    request = build_request(evidence, registry, {"modules": ["F"]}, current_config=config, seed=7)
    outcome = design(engineer, request)
    assert not outcome.fallback, outcome.reason
    return outcome


def note(outcome) -> str:
    return outcome.replies[-1].text


# ------------------------------------------------------------------ the tasks


@pytest.fixture
def sums(monkeypatch):
    """vf-toy-sums as a verifiers task without groups."""
    pytest.importorskip("verifiers.v1", reason='the verifiers extra: pip install -e ".[verifiers]"')
    monkeypatch.syspath_prepend(str(FIXTURES))
    from envengineer.testing import load_task

    generator, _ = load_task("verifiers", {"name": "verifiers", **SUMS})
    assert generator.knob_table is None and not generator.share_knob()
    return generator


def at(generator, **values):
    """The generator's default config with these top-level knobs set."""
    return generator.config_model.model_validate({**generator.default_config().model_dump(), **values})


@pytest.fixture
def arith_module():
    from conftest import import_arith

    return import_arith()


@pytest.fixture
def arith(pm, arith_module):
    """The arith example's generator (a knob table of three digit groups: ratio and terms 2-8, harder up)."""
    pm.register(arith_module, name="arith")
    return Registry(pm).create("generator", "arith", {}, where="task")


def arith_at(generator, terms: dict[str, int]):
    return generator.config_model.model_validate({"groups": {g: {"ratio": 1 / 3, "terms": t} for g, t in terms.items()}})


# ------------------------------------------------------------------ the helpers


@needs_verifiers
def test_a_task_without_groups_is_one_group_of_its_top_level_knobs(sums):
    config = at(sums, num_terms=4)
    assert knob_groups(sums, config) == {WHOLE: {"num_terms": 4, "max_operand": 9}}
    assert knob_groups(sums, config.model_dump()) == knob_groups(sums, config)
    assert group_cells(sums, signal({WHOLE: cell(0.3)}, overall=cell(0.7))) == {WHOLE: cell(0.7)}  # the overall cell
    assert group_cells(sums, {"overall": {"n": 0, "valid_rate": 0.0}}) == {}  # counts nothing: no evidence
    assert group_cells(sums, None) == {}
    assert sums.knob_proposal({WHOLE: {"num_terms": 5}}) == {"num_terms": 5}


def test_a_flat_task_reads_its_overall_cell_whatever_groupings_it_declares(flat_arith, arith):
    by_digits = signal({"1d": cell(0.9), "2d": cell(0.5)}, overall=cell(0.7), grouping="digits")
    assert group_cells(flat_arith, by_digits) == {WHOLE: cell(0.7)}
    assert set(group_cells(arith, by_digits)) == {"1d", "2d"}  # with a table: the primary grouping's cells


# ------------------------------------------------------------------ each engineer on vf-toy-sums without groups


@needs_verifiers
def test_curriculum_ramps_the_one_group_like_a_tables_last_group(registry, sums):
    engineer = registry.create("engineer", "curriculum")
    first = step(registry, sums, engineer, sums.default_config(), {}, round=0, rounds_total=4)  # progress 0
    last = step(registry, sums, engineer, sums.default_config(), {}, round=2, rounds_total=4)  # progress 1
    # easy + start (0.2) / end (0.6) of the way to the hard bound, the whole ramp (a single group is the last)
    assert first.replies[-1].proposal == {"num_terms": 3, "max_operand": 21}  # 2 + 0.2 x 4 = 2.8, 1 + 0.2 x 98 = 20.6
    assert last.replies[-1].proposal == {"num_terms": 4, "max_operand": 60}  # 2 + 0.6 x 4 = 4.4, 1 + 0.6 x 98 = 59.8
    assert last.config.model_dump() == {"num_terms": 4, "max_operand": 60}


@needs_verifiers
def test_heuristic_hardens_a_saturated_task_and_eases_a_collapsed_one(registry, sums):
    engineer = registry.create("engineer", "heuristic")
    solved = step(registry, sums, engineer, at(sums, num_terms=4), signal(overall=cell(0.99)))
    assert solved.config.model_dump() == {"num_terms": 5, "max_operand": 10}  # harden 0.05, at least one step each
    assert "all saturated (sampled 99%): harder" in note(solved)
    failed = step(registry, sums, engineer, at(sums, num_terms=4), signal(overall=cell(0.01)))
    assert failed.config.model_dump() == {"num_terms": 3, "max_operand": 7}  # 30% of the way to easy: 2 + 2 x 0.7, 1 + 8 x 0.7
    assert "all collapsed (sampled 1%): eased" in note(failed)
    # no training signal: the validation valid rate decides
    from_report = step(registry, sums, engineer, at(sums, num_terms=4), {}, rep=report(1.0))
    assert from_report.config.model_dump() == {"num_terms": 5, "max_operand": 10}
    assert "no training signal: validation valid rates" in note(from_report)


@needs_verifiers
def test_learnability_steers_the_one_group_toward_its_target(registry, sums):
    engineer = registry.create("engineer", "learnability")
    above = step(registry, sums, engineer, at(sums, num_terms=4), signal(overall=cell(0.95)))
    assert above.config.model_dump() == {"num_terms": 5, "max_operand": 14}  # step 0.05 of the range: 1 step; 9 + 4.9
    assert "above the band: harder" in note(above) and "one group (all: the task has no knob table)" in note(above)
    below = step(registry, sums, engineer, at(sums, num_terms=4), signal(overall=cell(0.1)))
    assert below.config.model_dump() == {"num_terms": 3, "max_operand": 4}  # 9 - 4.9 = 4.1
    stuck = step(registry, sums, engineer, at(sums, num_terms=4), signal(overall=cell(0.0)))
    assert stuck.config.model_dump() == {"num_terms": 3, "max_operand": 1}  # stuck_step 0.15: 4 - 0.6, 9 - 14.7 (clipped)
    inside = step(registry, sums, engineer, at(sums, num_terms=4), signal(overall=cell(0.5)))
    assert inside.config.model_dump() == {"num_terms": 4, "max_operand": 9} and "in band" in note(inside)


@needs_verifiers
def test_inverted_moves_the_one_group_away_from_its_target(registry, sums):
    engineer = registry.create("engineer", "inverted")
    assert step(registry, sums, engineer, at(sums, num_terms=4), signal(overall=cell(0.95))).config.model_dump() == {"num_terms": 3, "max_operand": 4}
    assert step(registry, sums, engineer, at(sums, num_terms=4), signal(overall=cell(0.1))).config.model_dump() == {"num_terms": 5, "max_operand": 14}


@needs_verifiers
def test_rlve_raises_the_one_groups_ceiling_when_it_is_solved_at_it(registry, sums):
    engineer = registry.create("engineer", "rlve", {"window": 1})  # window 1: the next round trains at the ceiling
    level0 = at(sums, num_terms=2, max_operand=1)  # every difficulty knob at its easy bound
    passed = step(registry, sums, engineer, level0, signal(overall=cell(0.95, samples=200)))
    assert passed.config.model_dump() == {"num_terms": 3, "max_operand": 2}  # level 1 of each knob
    assert "190/200 = 95% ≥ 90%: h→1" in note(passed)
    failed = step(registry, sums, engineer, level0, signal(overall=cell(0.5, samples=200)))
    assert failed.config.model_dump() == {"num_terms": 2, "max_operand": 1}  # h stays at 0


@needs_verifiers
def test_fixed_band_sweeps_its_cycle_on_the_one_group(registry, sums):
    swept = step(registry, sums, registry.create("engineer", "fixed-band", {"cycle": ["num_terms"]}), sums.default_config(),
                 signal(overall=cell(0.5)), round=1)
    assert swept.config.model_dump() == {"num_terms": 4, "max_operand": 9}  # round 2: the third of 2, 3, 4, 5, 6
    assert "it holds the whole budget" in note(swept)
    kept = step(registry, sums, registry.create("engineer", "fixed-band"), sums.default_config(), signal(overall=cell(0.5)))
    assert kept.config.model_dump() == sums.default_config().model_dump() and "difficulty knobs kept" in note(kept)


@needs_verifiers
@pytest.mark.parametrize("name", ["window", "learnability-shares"])
def test_budget_only_rules_say_one_group_holds_the_whole_budget(registry, sums, name):
    outcome = step(registry, sums, registry.create("engineer", name), at(sums, num_terms=4), signal(overall=cell(0.95)))
    assert outcome.config.model_dump() == {"num_terms": 4, "max_operand": 9}
    assert "one group (all: the task has no knob table)" in note(outcome) and "holds the whole budget" in note(outcome)


# ------------------------------------------------------------------ arith: per group, and flat as one group


ARITH_P = {"1d": 0.98, "2d": 0.5, "3d": 0.02}  # solved, in band, failing: harder, kept, easier


@pytest.mark.parametrize("name, want", [
    ("heuristic", {"1d": 5, "2d": 4, "3d": 3}),  # saturated: harder; collapsed: 30% of the way to 2
    ("learnability", {"1d": 5, "2d": 4, "3d": 3}),  # outside the band 50% ± 20%: one step
    ("inverted", {"1d": 3, "2d": 4, "3d": 5}),
])
def test_arith_groups_move_by_their_evidence_and_a_flat_arith_moves_as_one_of_them(registry, arith, flat_arith, name, want):
    engineer = registry.create("engineer", name)
    sig = signal({g: cell(p) for g, p in ARITH_P.items()}, grouping="digits")
    grouped = step(registry, arith, engineer, arith_at(arith, dict.fromkeys(ARITH_P, 4)), sig)
    assert {g: v["terms"] for g, v in arith.knob_values(grouped.config).items()} == want
    for g, p in ARITH_P.items():  # the same rule on one group: the flat task, its overall cell at the group's p
        flat = step(registry, flat_arith, engineer, flat_arith.config_model(terms=4), signal(overall=cell(p)))
        assert flat.config.terms == want[g], (g, note(flat))


def test_arith_rlve_raises_only_the_solved_groups_ceiling_and_the_flat_one_likewise(registry, arith, flat_arith):
    engineer = registry.create("engineer", "rlve", {"window": 1})
    sig = signal({"1d": cell(0.95, samples=200), "2d": cell(0.5, samples=200), "3d": cell(0.95, samples=40)}, grouping="digits")
    grouped = step(registry, arith, engineer, arith_at(arith, dict.fromkeys(ARITH_P, 2)), sig)
    assert {g: v["terms"] for g, v in arith.knob_values(grouped.config).items()} == {"1d": 3, "2d": 2, "3d": 2}  # 3d: 40 < 128 samples
    flat = step(registry, flat_arith, engineer, flat_arith.config_model(terms=2), signal(overall=cell(0.95, samples=200)))
    assert flat.config.terms == 3


def test_arith_curriculum_ramps_the_flat_task_as_the_tables_last_group(registry, arith, flat_arith):
    engineer = registry.create("engineer", "curriculum")
    grouped = step(registry, arith, engineer, arith.default_config(), {}, round=2, rounds_total=4)
    flat = step(registry, flat_arith, engineer, flat_arith.default_config(), {}, round=2, rounds_total=4)
    terms = {g: v["terms"] for g, v in arith.knob_values(grouped.config).items()}
    assert terms == {"1d": 4, "2d": 5, "3d": 6} and flat.config.terms == terms["3d"]  # 2 + 0.6 x 6 = 5.6


# ------------------------------------------------------------------ learnability: instances and kept prompts

#: The hand-computed example of docs/engineers.md: p, and the share of each group's prompts kept (mixed).
P = {"1d": 0.5, "2d": 0.2, "3d": 0.05}
KEEP = {"1d": 0.8, "2d": 0.4, "3d": 0.125}


def kept_signal(p=P, keep=KEEP) -> dict[str, Any]:
    return signal({g: cell(p[g], mixed=keep[g]) for g in p}, grouping="digits")


def shares(outcome) -> dict[str, float]:
    return {g: v["ratio"] for g, v in outcome.replies[-1].proposal["groups"].items()}


KEPT = {"bookkeeping": {"budget_mode": "kept_prompts"}}


def test_learnability_weights_by_hand():
    # w = p(1 - p) + 0.01: 0.26, 0.17, 0.0575; divided by the keep rate: 0.325, 0.425, 0.46
    weight, rate = learnability_weights(P, 0.01)
    assert weight == pytest.approx({"1d": 0.26, "2d": 0.17, "3d": 0.0575}) and rate == {}
    weight, rate = learnability_weights(P, 0.01, KEEP)
    assert weight == pytest.approx({"1d": 0.325, "2d": 0.425, "3d": 0.46}) and rate == KEEP
    # expected kept prompts, drawn weight x keep rate, are the instance form's weights again
    assert {g: weight[g] * KEEP[g] for g in P} == pytest.approx({"1d": 0.26, "2d": 0.17, "3d": 0.0575})
    # a keep rate below min_keep counts at min_keep; an unknown one at the mean of the known ones
    weight, rate = learnability_weights({"a": 0.0, "b": 0.5, "c": 0.2}, 0.01, {"a": 0.0, "b": 0.8, "c": None}, min_keep=0.1)
    assert rate == pytest.approx({"a": 0.1, "b": 0.8, "c": 0.4}) and weight == pytest.approx({"a": 0.1, "b": 0.325, "c": 0.425})
    # no keep rate known: every group alike, the instance form's proportions
    weight, _ = learnability_weights(P, 0.01, dict.fromkeys(P))
    assert weight == pytest.approx({"1d": 0.26, "2d": 0.17, "3d": 0.0575})


def test_learnability_at_instance_budgets_splits_the_drawn_instances(registry, arith):
    engineer = registry.create("engineer", "learnability", {"mix": 1.0, "difficulty_knobs": []})
    outcome = step(registry, arith, engineer, arith.default_config(), kept_signal())
    # 0.26, 0.17, 0.0575 over 0.4875
    assert shares(outcome) == pytest.approx({"1d": 0.5333, "2d": 0.3487, "3d": 0.1179}, abs=1e-4)
    assert "kept-prompt budget" not in note(outcome)


def test_learnability_at_kept_prompt_budgets_splits_the_kept_prompts(registry, arith):
    engineer = registry.create("engineer", "learnability", {"mix": 1.0, "difficulty_knobs": []})
    outcome = step(registry, arith, engineer, arith.default_config(), kept_signal(), training=KEPT)  # the round's recorded mode
    # 0.325, 0.425, 0.46 over 1.21: the low-p groups draw more, and the kept prompts (x 0.8, 0.4, 0.125) split 0.26 : 0.17 : 0.0575
    got = shares(outcome)
    assert got == pytest.approx({"1d": 0.2686, "2d": 0.3512, "3d": 0.3802}, abs=1e-4)
    kept = {g: got[g] * KEEP[g] for g in P}
    assert {g: v / sum(kept.values()) for g, v in kept.items()} == pytest.approx({"1d": 0.5333, "2d": 0.3487, "3d": 0.1179}, abs=2e-4)
    assert "kept-prompt budget: shares ∝ (p(1-p) + epsilon) / keep rate" in note(outcome) and "(keep 12%)" in note(outcome)
    # the default mix 0.8 against the current thirds: 0.2 / 3 + 0.8 x the target
    mixed = step(registry, arith, registry.create("engineer", "learnability", {"difficulty_knobs": []}), arith.default_config(),
                 kept_signal(), training=KEPT)
    assert shares(mixed) == pytest.approx({g: 0.2 / 3 + 0.8 * v for g, v in {"1d": 0.325 / 1.21, "2d": 0.425 / 1.21, "3d": 0.46 / 1.21}.items()}, abs=1e-4)


def test_a_dead_group_draws_at_most_its_weight_over_min_keep(registry, arith):
    engineer = registry.create("engineer", "learnability", {"mix": 1.0, "difficulty_knobs": []})
    p, keep = {"1d": 0.5, "2d": 0.2, "3d": 0.0}, {"1d": 0.8, "2d": 0.4, "3d": 0.0}
    outcome = step(registry, arith, engineer, arith.default_config(), kept_signal(p, keep), training=KEPT)
    # 0.325, 0.425, 0.01 / 0.1 = 0.1 over 0.85
    assert shares(outcome) == pytest.approx({"1d": 0.3824, "2d": 0.5, "3d": 0.1176}, abs=1e-4)
    assert "share 0.3333→0.1176 (keep 0%, counted 10%)" in note(outcome)


def test_the_budget_mode_option_overrides_the_recorded_one(registry, arith):
    instances = registry.create("engineer", "learnability", {"mix": 1.0, "difficulty_knobs": [], "budget_mode": "instances"})
    assert shares(step(registry, arith, instances, arith.default_config(), kept_signal(), training=KEPT)) == pytest.approx(
        {"1d": 0.5333, "2d": 0.3487, "3d": 0.1179}, abs=1e-4)
    kept = registry.create("engineer", "learnability", {"mix": 1.0, "difficulty_knobs": [], "budget_mode": "kept_prompts"})
    assert shares(step(registry, arith, kept, arith.default_config(), kept_signal())) == pytest.approx(
        {"1d": 0.2686, "2d": 0.3512, "3d": 0.3802}, abs=1e-4)
    with pytest.raises(Exception, match="budget_mode"):
        registry.create("engineer", "learnability", {"budget_mode": "steps"})


def test_learnability_shares_takes_the_kept_prompt_form_too(registry, arith):
    outcome = step(registry, arith, registry.create("engineer", "learnability-shares", {"mix": 1.0}), arith.default_config(),
                   kept_signal(), training=KEPT)
    assert shares(outcome) == pytest.approx({"1d": 0.2686, "2d": 0.3512, "3d": 0.3802}, abs=1e-4)
    assert {g: v["terms"] for g, v in arith.knob_values(outcome.config).items()} == dict.fromkeys(P, 2)


def test_history_is_read_per_group_on_a_flat_task_too(registry, flat_arith):
    """heuristic's "improved since last round" compares the one group's p with last round's overall p."""
    engineer = registry.create("engineer", "heuristic")
    last = RoundRecord(round=0, config={"terms": 4}, report={}, signal=signal(overall=cell(0.96)))
    improved = step(registry, flat_arith, engineer, flat_arith.config_model(terms=4), signal(overall=cell(0.99)), round=1, history=[last])
    assert improved.config.terms == 4  # saturated, but improving: kept
    flat = RoundRecord(round=0, config={"terms": 4}, report={}, signal=signal(overall=cell(0.99)))
    stalled = step(registry, flat_arith, engineer, flat_arith.config_model(terms=4), signal(overall=cell(0.99)), round=1, history=[flat])
    assert stalled.config.terms == 5
