"""Projection of untrusted proposals onto the generator's constraints."""

import math

from hypothesis import given, settings, strategies as st

from envengineer.tasks.mapf_frozenlake import SIZE_NAMES
from envengineer.tasks.mapf_frozenlake.knobs import max_hole_ratio, uniform_config
from envengineer.tasks.mapf_frozenlake.projection import project
from envengineer.tasks.mapf_frozenlake.shares import RATIO_FLOOR


def _check(config, agents=2):
    ratios = [k.ratio for k in config.sizes.values()]
    assert list(config.sizes) == list(SIZE_NAMES)
    assert math.isclose(sum(ratios), 1.0, abs_tol=1e-6)
    assert min(ratios) >= RATIO_FLOOR - 1e-9
    for name, knobs in config.sizes.items():
        n = int(name.split("x")[0])
        assert 0 <= knobs.hole_ratio <= max_hole_ratio(n, agents) + 1e-9
        assert 0 <= knobs.wait_ratio <= 1


def test_raising_one_ratio_lowers_the_others_and_keeps_the_raise():
    p = project({"sizes": {"7x7": {"ratio": 0.3}}}, uniform_config())
    assert p.config.sizes["7x7"].ratio == 0.3
    assert "sizes.7x7.ratio" in p.accepted
    assert all(p.config.sizes[n].ratio < 0.125 for n in SIZE_NAMES if n != "7x7")
    _check(p.config)


def test_every_change_is_reported():
    p = project(
        {"sizes": {"3x3": {"ratio": -1, "hole_ratio": 2, "wait_ratio": "lots", "speed": 3}, "12x12": {}}, "budget": 9000},
        uniform_config(),
    )
    fields = {c.field: c.reason for c in p.changes}
    assert "floor" in fields["sizes.3x3.ratio"]
    assert "clipped" in fields["sizes.3x3.hole_ratio"]
    assert "not a finite number" in fields["sizes.3x3.wait_ratio"]
    assert "unknown knob" in fields["sizes.3x3.speed"]
    assert "unknown map size" in fields["sizes.12x12"]
    assert "unknown field" in fields["budget"]
    _check(p.config)


def test_size_keys_without_the_sizes_wrapper_and_numeric_strings():
    p = project({"6x6": {"wait_ratio": "0.6"}, 9: {"hole_ratio": "25%"}}, uniform_config())
    assert p.config.sizes["6x6"].wait_ratio == 0.6
    assert p.config.sizes["9x9"].hole_ratio == 0.25


def test_non_mapping_proposal_keeps_the_config():
    current = uniform_config()
    for junk in (None, [], "ratio: 1", 42, {"sizes": [1, 2]}):
        p = project(junk, current)
        assert p.config == current


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=12,
)
knob = st.dictionaries(st.sampled_from(["ratio", "hole_ratio", "wait_ratio", "x"]), json_values | st.floats(-2, 2), max_size=4)
proposals = st.dictionaries(st.sampled_from([*SIZE_NAMES, "13x13", "3"]), knob, max_size=8).map(lambda d: {"sizes": d}) | json_values


@settings(max_examples=300, deadline=None)
@given(proposal=proposals, agents=st.integers(1, 5))
def test_projection_never_fails_and_always_lands_in_the_feasible_set(proposal, agents):
    p = project(proposal, uniform_config(), agents=agents)
    _check(p.config, agents)
