"""Declared knobs: the declaration, the baselines and the H module reading it, and the default
projection (never raises, stays in bounds, shares sum to 1), on MAPF and on the arith example."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from pydantic import BaseModel, ConfigDict, Field

from envengineer.components import Engineer, GenerationResult, Generator, Knob, Validator, Verdict
from envengineer.design.contract import EngineerReply
from envengineer.design.step import design
from envengineer.design.prompts import build_request
from envengineer.errors import ConfigError
from envengineer.design.evidence import Evidence, RoundRecord
from envengineer.components.knobs import renormalize
from envengineer.registry import Registry

ARITH = Path(__file__).resolve().parents[1] / "examples" / "envengineer-arith"


def _arith_module():
    if str(ARITH) not in sys.path:
        sys.path.insert(0, str(ARITH))
    return importlib.import_module("envengineer_arith.plugin")


@pytest.fixture
def arith_registry(pm):
    pm.register(_arith_module(), name="arith")
    return Registry(pm)


@pytest.fixture
def arith(arith_registry):
    return arith_registry.create("generator", "arith", {"name": "arith"})


def _rates(n, valid, failures=None):
    rate = valid / n
    return {"n": n, "valid": valid, "optimal": valid, "valid_rate": rate, "optimal_rate": rate,
            "failures": failures if failures is not None else ({"wrong": n - valid} if n > valid else {})}


def _report(valid_rates, n=20):
    by = {g: _rates(n, round(rate * n)) for g, rate in valid_rates.items()}
    valid = sum(r["valid"] for r in by.values())
    return {"overall": _rates(n * len(by), valid), "by": {"digits": by}}


def _request(registry, generator, config, valid_rates, *, round=0, rounds_total=3, history=()):
    evidence = Evidence(task=generator, round=round, rounds_total=rounds_total, config=config.model_dump(),
                        report=_report(valid_rates), failure_types=("parse", "wrong"), history=list(history))
    return build_request(evidence, registry, {"modules": ["F"]})


def _arith_config(arith, **terms):
    proposal = {"groups": {g: {"terms": t} for g, t in terms.items()}}
    projection = arith.project(proposal, arith.default_config())
    assert set(projection.accepted) == {f"groups.{g}.terms" for g in terms}
    return projection.config


# ------------------------------------------------------------------ declarations


def test_mapf_declares_its_knobs(registry):
    mapf, _ = registry.task("mapf-frozenlake")
    assert mapf.knob_table == "sizes"
    assert [k.name for k in mapf.knobs] == ["ratio", "hole_ratio", "wait_ratio"]
    assert mapf.share_knob().name == "ratio" and mapf.share_knob().low == 0.02
    assert [k.name for k in mapf.difficulty_knobs()] == ["hole_ratio", "wait_ratio"]
    assert all(k.harder == "up" and not k.integer for k in mapf.difficulty_knobs())
    assert mapf.knob("wait_ratio").practices == ("conflict",)
    values = mapf.knob_values(mapf.default_config())
    assert list(values) == list(mapf.groups()) and values["3x3"] == {"ratio": 0.125, "hole_ratio": 0.1, "wait_ratio": 0.3}
    # the helpers round-trip through the task's own projection
    proposal = mapf.knob_proposal({"7x7": {"hole_ratio": 0.25}})
    assert proposal == {"sizes": {"7x7": {"hole_ratio": 0.25}}}
    assert mapf.project(proposal, mapf.default_config()).accepted == ("sizes.7x7.hole_ratio",)
    with pytest.raises(KeyError, match="declares no knob 'holes'"):
        mapf.knob("holes")


def test_arith_declares_an_integer_difficulty_knob(arith):
    assert arith.knob_table == "groups"
    terms = arith.knob("terms")
    assert (terms.low, terms.high, terms.step, terms.integer, terms.harder) == (2, 8, 1, True, "up")
    assert arith.share_knob().name == "ratio"
    assert arith.knob_values(arith.default_config()) == {g: {"ratio": 1 / 3, "terms": 2} for g in ("1d", "2d", "3d")}


def test_a_knob_declaration_is_checked():
    with pytest.raises(ValueError, match="low <= high"):
        Knob("x", 1, 0, 0.1)
    with pytest.raises(ValueError, match="integer knob"):
        Knob("x", 0, 10, 0.5, integer=True)
    with pytest.raises(ValueError, match="harder"):
        Knob("x", 0, 1, 0.1, harder="sideways")  # type: ignore[arg-type]


def test_snap_and_shift_keep_whole_steps_and_bounds():
    terms = Knob("terms", 2, 8, 1, integer=True, harder="up")
    assert terms.snap(3.4) == 3 and isinstance(terms.snap(3.4), int)
    assert terms.snap(99) == 8 and terms.snap(-5) == 2
    assert terms.shift(4, 0.05) == 5 and terms.shift(4, -0.3) == 3  # at least one step
    assert terms.shift(8, 1) == 8 and terms.shift(2, -1) == 2  # never past a bound
    hole = Knob("hole_ratio", 0.0, 0.5, 0.0001, harder="up")
    assert hole.snap(0.123456) == 0.1235 and hole.snap(0.7) == 0.5
    assert hole.shift(0.1, -0.03) == 0.07
    odd = Knob("w", 0.0, 1.0, 0.3)
    assert odd.snap(0.5) == 0.6 and odd.snap(1.0) == 0.9  # on the grid and within the bounds


def test_a_task_section_may_name_its_task_without_declaring_name(arith_registry):
    assert "name" not in arith_registry.get("generator", "arith").Options.model_fields
    arith_registry.create("generator", "arith", {"name": "arith"}, where="task")
    with pytest.raises(ConfigError, match="name"):
        arith_registry.create("generator", "arith", {"name": "another"}, where="task")


# ------------------------------------------------------------------ baselines


def test_heuristic_moves_integer_knobs_by_exactly_one_step(arith_registry, arith):
    config = _arith_config(arith, **{"1d": 4, "2d": 4, "3d": 4})
    request = _request(arith_registry, arith, config, {"1d": 1.0, "2d": 0.5, "3d": 0.0})
    outcome = design(arith_registry.create("engineer", "heuristic"), request)
    assert not outcome.fallback, outcome.reason
    after = outcome.config.groups
    assert after["1d"].terms == 5  # saturated: one step harder (the 0.05 raise no longer rounds away)
    assert after["3d"].terms == 3  # collapsed: one step easier
    assert after["2d"].terms == 4
    assert after["2d"].ratio > config.groups["2d"].ratio  # budget toward the lagging group
    assert abs(sum(k.ratio for k in after.values()) - 1) < 1e-6
    assert "groups.1d.terms" in outcome.projection.accepted and "groups.3d.terms" in outcome.projection.accepted


def test_heuristic_stays_within_the_declared_bounds(arith_registry, arith):
    config = _arith_config(arith, **{"1d": 8, "2d": 2, "3d": 2})
    request = _request(arith_registry, arith, config, {"1d": 1.0, "2d": 0.5, "3d": 0.0})
    reply = arith_registry.create("engineer", "heuristic").propose(request)
    groups = reply.proposal.get("groups", {})
    assert groups.get("1d", {}).get("terms", 8) == 8  # already at the hard bound
    assert groups.get("3d", {}).get("terms", 2) == 2  # already at the easy bound


def test_heuristic_options_name_any_declared_knob(arith_registry, arith):
    config = _arith_config(arith, **{"1d": 4, "2d": 4, "3d": 4})
    request = _request(arith_registry, arith, config, {"1d": 1.0, "2d": 0.5, "3d": 0.5})
    none = arith_registry.create("engineer", "heuristic", {"difficulty_knobs": []}).propose(request)
    assert "terms" not in none.proposal.get("groups", {}).get("1d", {})
    unknown = arith_registry.create("engineer", "heuristic", {"difficulty_knobs": ["terms", "hole_ratio"]}).propose(request)
    assert unknown.proposal["groups"]["1d"]["terms"] == 5 and "ignored hole_ratio" in unknown.text


def test_curriculum_raises_a_difficulty_knob_over_rounds(arith_registry, arith):
    engineer = arith_registry.create("engineer", "curriculum")
    config = arith.default_config()
    designed = [design(engineer, _request(arith_registry, arith, config, {"1d": 0.5, "2d": 0.5, "3d": 0.5}, round=r, rounds_total=4)) for r in (0, 1, 2)]
    assert not any(o.fallback for o in designed)
    terms = [[o.config.groups[g].terms for g in ("1d", "2d", "3d")] for o in designed]
    for group in range(3):
        assert terms[0][group] <= terms[1][group] <= terms[2][group]
        assert terms[2][group] > terms[0][group]
    assert terms[2] == sorted(terms[2])  # later (harder) groups get more
    assert all(isinstance(t, int) and 2 <= t <= 8 for row in terms for t in row)
    last = designed[-1].config.groups
    assert last["3d"].ratio > last["1d"].ratio


def test_curriculum_ramps_any_declared_knob(arith_registry, arith):
    engineer = arith_registry.create("engineer", "curriculum", {"ramps": {"terms": {"start": 3, "end": 7, "spread": 0}}})
    outcome = design(engineer, _request(arith_registry, arith, arith.default_config(), {"1d": 0.5, "2d": 0.5, "3d": 0.5}, round=1, rounds_total=3))
    assert {k.terms for k in outcome.config.groups.values()} == {7}
    with pytest.raises(ConfigError, match="hole_start: was removed"):
        arith_registry.create("engineer", "curriculum", {"hole_start": 0.1})


def test_learnability_and_random_use_the_declaration(arith_registry, arith):
    request = _request(arith_registry, arith, arith.default_config(), {"1d": 1.0, "2d": 0.5, "3d": 0.0})
    after = design(arith_registry.create("engineer", "learnability"), request).config.groups
    assert max(after, key=lambda g: after[g].ratio) == "2d"
    drawn = design(arith_registry.create("engineer", "random", {"seed": 1}), request)
    assert not drawn.fallback
    assert drawn.config != arith.default_config() and abs(sum(k.ratio for k in drawn.config.groups.values()) - 1) < 1e-6


class _Says(Engineer):
    name: ClassVar[str] = "says"
    text: ClassVar[str] = ""

    def propose(self, request):
        return EngineerReply(text=self.text, model="says")


def test_an_in_range_arith_proposal_is_applied(arith_registry, arith):
    request = _request(arith_registry, arith, arith.default_config(), {"1d": 0.9, "2d": 0.5, "3d": 0.1})
    engineer = _Says()
    engineer.text = "More addends where it is easy.\n\n```yaml\ngroups:\n  1d: {terms: 5, ratio: 0.2}\n  3d: {terms: 3}\n```\n"
    outcome = design(engineer, request)
    assert not outcome.fallback, outcome.reason
    groups = outcome.config.groups
    assert (groups["1d"].terms, groups["1d"].ratio, groups["3d"].terms) == (5, 0.2, 3)
    assert groups["2d"].ratio == groups["3d"].ratio == 0.4
    assert set(outcome.projection.accepted) == {"groups.1d.terms", "groups.1d.ratio", "groups.3d.terms"}


# ------------------------------------------------------------------ H module


def test_history_shows_the_declared_knob_table(arith_registry, arith):
    config = _arith_config(arith, **{"1d": 4, "2d": 3, "3d": 2})
    request = _request(arith_registry, arith, config, {"1d": 1.0, "2d": 0.5, "3d": 0.0},
                       round=1, history=[RoundRecord(0, arith.default_config().model_dump(), _report({"1d": 0.5, "2d": 0.5, "3d": 0.5}))])
    text = arith_registry.create("context_module", "H").render(request.evidence)
    assert "| digits per term | ratio | terms | valid | optimal | top failures |" in text
    assert "| 1d | 0.333 | 4 | 100.0% |" in text


# ------------------------------------------------------------ default project()


class FlatConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    level: int = Field(3, ge=0, le=10)
    noise: float = Field(0.1, ge=0, le=1)
    label: str = Field("x", max_length=8)


class FlatGenerator(Generator):
    """No knob table: the declared knobs are top-level fields, beside an undeclared one."""

    name: ClassVar[str] = "flat"
    config_model: ClassVar[type[BaseModel]] = FlatConfig
    knobs: ClassVar[tuple[Knob, ...]] = (
        Knob("level", 0, 10, 1, integer=True, harder="up"),
        Knob("noise", 0.0, 1.0, 0.05, harder="up"),
    )

    def generate(self, config, *, n, seed, workers=1, progress=None):
        return GenerationResult([{"id": str(i)} for i in range(n)])

    def render(self, record, style="full"):
        return "?"


def test_defaults_give_a_config_and_a_flat_projection():
    flat = FlatGenerator()
    assert flat.default_config() == FlatConfig() and flat.knob_values(flat.default_config()) == {}
    p = flat.project({"level": 4.6, "noise": "30%", "label": "yz", "other": 1}, flat.default_config())
    assert (p.config.level, p.config.noise, p.config.label) == (5, 0.3, "yz")
    assert set(p.accepted) == {"noise", "label"}
    assert {c.field: c.reason for c in p.changes} == {"level": "put on the knob's step 1", "other": "unknown field; ignored"}
    bad = flat.project({"label": "far too long a label", "level": float("nan")}, flat.default_config())
    assert bad.config == flat.default_config() and not bad.accepted and len(bad.changes) == 2
    assert flat.random_config(1) != flat.random_config(2)


def test_a_config_model_without_defaults_needs_its_own_default_config():
    class Bare(BaseModel):
        size: int

    class BareGenerator(FlatGenerator):
        name: ClassVar[str] = "bare"
        config_model: ClassVar[type[BaseModel]] = Bare

    with pytest.raises(TypeError, match="size"):
        BareGenerator().default_config()


def test_renormalize_pins_the_proposed_shares():
    share = Knob("ratio", 0.02, 1.0, 0.0001, share=True)
    assert renormalize({"a": 0.5, "b": 0.5, "c": 0.5}, share, pinned=["a"]) == {"a": 0.5, "b": 0.25, "c": 0.25}
    assert renormalize({"a": 1.0, "b": 1.0, "c": 0.0}, share, pinned=["a", "b"]) == {"a": 0.49, "b": 0.49, "c": 0.02}
    assert sum(renormalize({"a": 0, "b": 0, "c": 0}, share).values()) == pytest.approx(1.0)


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10**30, 10**30), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["0.3", "30%", "1e400", "nan", "-2", "  7 "]),
)
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
_knob_values = st.dictionaries(st.sampled_from(["ratio", "terms", "digits", "", "level"]), _values | _scalars, max_size=4)
_groups = st.dictionaries(st.sampled_from(["1d", "2d", "3d", "4d", "1D"]) | st.integers(0, 3), _knob_values | _values, max_size=5)
_proposals = st.one_of(
    _values,
    st.dictionaries(st.sampled_from(["groups", "sizes", "terms", "level"]) | st.text(max_size=6), _groups | _values, max_size=3),
    st.builds(lambda g: {"groups": g}, _groups),
)


def _check_arith(arith, projection):
    config = type(arith.default_config()).model_validate(projection.config.model_dump())
    values = arith.knob_values(config)
    assert set(values) == {"1d", "2d", "3d"}
    for group in values.values():
        assert isinstance(group["terms"], int) and 2 <= group["terms"] <= 8
        assert 0.01 - 1e-9 <= group["ratio"] <= 1.0
    assert math.isclose(sum(g["ratio"] for g in values.values()), 1.0, abs_tol=1e-6)
    assert not any(c.field == "<proposal>" and "could not be projected" in c.reason for c in projection.changes)
    for field in projection.accepted:
        assert field.startswith("groups.")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(proposal=_proposals, seed=st.integers(0, 50))
def test_default_project_never_raises_and_stays_in_bounds(arith, proposal, seed):
    current = arith.random_config(seed)
    _check_arith(arith, arith.project(proposal, current))


@settings(max_examples=200, deadline=None)
@given(proposal=_proposals)
def test_default_project_on_a_flat_config(proposal):
    flat = FlatGenerator()
    p = flat.project(proposal, flat.default_config())
    assert 0 <= p.config.level <= 10 and isinstance(p.config.level, int) and 0 <= p.config.noise <= 1
    assert abs(p.config.noise / 0.05 - round(p.config.noise / 0.05)) < 1e-9
    assert not any("could not be projected" in c.reason for c in p.changes)
