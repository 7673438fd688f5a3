"""The MAPF-FrozenLake answer parser, formatter and validator (mapf-frozenlake.md)."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envengineer.components import Validator, Verdict
from envengineer.tasks.mapf_frozenlake import answer as answer_module
from envengineer.tasks.mapf_frozenlake.answer import HUGE, ParsedAnswer, format_answer, parse_answer, read_answer
from envengineer.tasks.mapf_frozenlake.instance import from_record
from envengineer.tasks.mapf_frozenlake.validator import (
    FAILURE_TYPES,
    MapfValidator,
    score_instance,
    solution_cost,
)

MB = 1 << 20

# Two agents on a 3x3 map with a hole in the middle; the optimum walks both edges.
HOLE_RECORD = {
    "id": "t-hole",
    "size": 3,
    "grid": ["FFF", "FHF", "FFF"],
    "agents": [{"start": [0, 0], "goal": [0, 2]}, {"start": [2, 0], "goal": [2, 2]}],
    "hole_ratio": 1 / 9,
    "optimal_cost": 4,
    "requires_wait": False,
    "seed": 0,
}
P1 = [(0, 0), (0, 1), (0, 2)]
P2 = [(2, 0), (2, 1), (2, 2)]


def record(agents, grid=("FFF", "FFF", "FFF"), optimal_cost=None, id="t"):
    return {
        "id": id,
        "size": len(grid),
        "grid": list(grid),
        "agents": [{"start": list(s), "goal": list(g)} for s, g in agents],
        "optimal_cost": optimal_cost,
    }


def verdict(rec, response):
    return MapfValidator().score(rec, response)


def checks(rec, *paths):
    return verdict(rec, format_answer(paths)).failed_checks


# ------------------------------------------------------------------ the eight checks


def test_valid_optimal_answer():
    v = verdict(HOLE_RECORD, format_answer([P1, P2]))
    assert v == Verdict(valid=True, optimal=True, failure=None, failed_checks=(), cost=4)
    assert v.reward == 1.0


@pytest.mark.parametrize(
    "response",
    [
        "",
        "I would move right twice.",
        "<answer>\nAgent 1: (0,0) -> (0,1) then (0,2)\nAgent 2: (2,0) -> (2,1) -> (2,2)\n</answer>",
        "<answer>\nAgent 1:\nAgent 2: (2,0) -> (2,1) -> (2,2)\n</answer>",
        "<answer>\nAgent 1: (0,0) -> (0,1) -> (0,2).\nAgent 2: (2,0)\n</answer>",
        "<answer>\nAgent 1: [(0,0), (0,1), (0,2)]\nAgent 2: (2,0)\n</answer>",
        "<answer>\nAgent 1: (0,0) -> (0,1.5)\nAgent 2: (2,0)\n</answer>",
        "<answer>\nAgent 1: (0,0) - (0,1)\nAgent 2: (2,0)\n</answer>",
        "<answer>\nAgent 1: (0,0) => (0,1)\nAgent 2: (2,0)\n</answer>",
        "<answer>\nAgent 1: (0,0,1)\nAgent 2: (2,0)\n</answer>",
        "<answer>the agents stay put</answer>",
        "<answer>\n- Agent 1: (0,0) -> (0,1) -> (0,2)\n</answer>",
    ],
)
def test_parse_failures(response):
    v = verdict(HOLE_RECORD, response)
    assert v == Verdict(valid=False, optimal=False, failure="parse", failed_checks=("parse",), cost=None)
    assert parse_answer(response).error


def test_parse_failure_stops_everything_even_with_other_lines_fine():
    text = format_answer([P1, P2]).replace("</answer>", "Agent 3: nowhere\n</answer>")
    assert verdict(HOLE_RECORD, text).failed_checks == ("parse",)


@pytest.mark.parametrize(
    "lines",
    [
        ["Agent 1: (0,0) -> (0,1) -> (0,2)"],
        ["Agent 1: (0,0) -> (0,1) -> (0,2)", "Agent 1: (0,0) -> (0,1) -> (0,2)", "Agent 2: (2,0) -> (2,1) -> (2,2)"],
        ["Agent 1: (0,0) -> (0,1) -> (0,2)", "Agent 2: (2,0) -> (2,1) -> (2,2)", "Agent 3: (1,0)"],
        ["Agent 0: (1,0)", "Agent 1: (0,0) -> (0,1) -> (0,2)", "Agent 2: (2,0) -> (2,1) -> (2,2)"],
        ["Agent 1: (0,0) -> (0,1) -> (0,2)", "Agent 99999999999999999999999999: (2,0) -> (2,1) -> (2,2)"],
    ],
)
def test_agent_count(lines):
    v = verdict(HOLE_RECORD, "<answer>\n" + "\n".join(lines) + "\n</answer>")
    assert v.failed_checks == ("agent_count",)
    assert v.failure == "agent_count" and not v.valid and v.cost is None


def test_agent_order_does_not_matter_and_leading_zeros_are_numbers():
    text = "<answer>\nAgent 02: (2,0) -> (2,1) -> (2,2)\nAgent 1: (0,0) -> (0,1) -> (0,2)\n</answer>"
    assert verdict(HOLE_RECORD, text).valid


def test_each_single_failure():
    assert checks(HOLE_RECORD, [(1, 0), (0, 0), (0, 1), (0, 2)], P2) == ("start",)
    assert checks(HOLE_RECORD, [(0, 0), (-1, 0), (0, 0), (0, 1), (0, 2)], P2) == ("out_of_bounds",)
    assert checks(HOLE_RECORD, [(0, 0), (0, 2)], P2) == ("illegal_move",)
    assert checks(HOLE_RECORD, [(0, 0), (1, 0), (1, 1), (1, 2), (0, 2)], P2) == ("hole",)
    assert checks(HOLE_RECORD, [(0, 0), (0, 1)], P2) == ("goal",)
    swap = record([((0, 0), (0, 1)), ((0, 1), (0, 0))])
    assert checks(swap, [(0, 0), (0, 1)], [(0, 1), (0, 0)]) == ("conflict",)
    meet = record([((0, 0), (0, 2)), ((0, 2), (0, 0))])
    assert checks(meet, [(0, 0), (0, 1), (0, 2)], [(0, 2), (0, 1), (0, 0)]) == ("conflict",)


def test_every_failure_is_reported_in_order_and_the_first_is_the_failure():
    # Agent 2 missing; agent 1 starts wrong, leaves the grid, jumps, lands in the hole
    # and stops short of its goal.
    text = format_answer([[(1, 0), (1, -1), (1, 1)]])
    v = verdict(HOLE_RECORD, text)
    assert v.failed_checks == ("agent_count", "start", "out_of_bounds", "illegal_move", "hole", "goal")
    assert v.failure == "agent_count"
    # Later checks after a start failure.
    v = verdict(HOLE_RECORD, format_answer([[(0, 1), (1, 1), (2, 1), (2, 2)], P2]))
    assert v.failed_checks == ("start", "hole", "conflict", "goal")
    assert v.failure == "start"


def test_out_of_bounds_cells_are_not_looked_up_as_holes():
    v = verdict(HOLE_RECORD, format_answer([[(0, 0), (0, 1), (0, 2), (0, 3), (0, 2)], P2]))
    assert v.failed_checks == ("out_of_bounds",)
    v = verdict(HOLE_RECORD, format_answer([[(0, 0), (3, 3), (9, 9), (0, 2)], P2]))
    assert v.failed_checks == ("out_of_bounds", "illegal_move")


def test_illegal_move_into_a_hole_reports_both():
    assert checks(HOLE_RECORD, [(0, 0), (1, 1), (0, 1), (0, 2)], P2) == ("illegal_move", "hole")


def test_negative_and_huge_coordinates_fail_out_of_bounds():
    for cell in ["(-1,0)", "(99999999999999999999,1)", "(1," + "9" * 5000 + ")", "(-" + "9" * 300 + ",0)"]:
        text = f"<answer>\nAgent 1: (0,0) -> {cell} -> (0,2)\nAgent 2: (2,0) -> (2,1) -> (2,2)\n</answer>"
        v = verdict(HOLE_RECORD, text)
        assert v.failure == "out_of_bounds"
        assert v.failed_checks[:2] == ("out_of_bounds", "illegal_move")
    huge = parse_answer("Agent 1: (" + "9" * 5000 + ",0)").paths
    assert huge == {1: ((HUGE, 0),)}


# ------------------------------------------------------------------- conflict rules


def test_following_into_a_vacated_cell_is_allowed():
    rec = record([((0, 0), (0, 2)), ((0, 1), (1, 2))], optimal_cost=4)
    v = verdict(rec, format_answer([[(0, 0), (0, 1), (0, 2)], [(0, 1), (0, 2), (1, 2)]]))
    assert v.valid and v.cost == 4 and v.optimal


def test_a_finished_agent_still_blocks_its_cell():
    rec = record([((0, 0), (0, 2)), ((1, 1), (0, 1))])
    # Agent 2 is done at t=1 on (0,1); agent 1 walks through it at t=2.
    v = verdict(rec, format_answer([[(0, 0), (0, 0), (0, 1), (0, 2)], [(1, 1), (0, 1)]]))
    assert v.failed_checks == ("conflict",)
    # Also long after it finished.
    v = verdict(rec, format_answer([[(0, 0), (1, 0), (1, 0), (1, 0), (0, 0), (0, 1), (0, 2)], [(1, 1), (0, 1)]]))
    assert v.failed_checks == ("conflict",)
    # Waiting for agent 1 to pass first is fine: cost 2 + 3.
    v = verdict(rec, format_answer([[(0, 0), (0, 1), (0, 2)], [(1, 1), (1, 1), (1, 1), (0, 1)]]))
    assert v.valid and v.cost == 5


def test_edge_conflict_needs_a_real_swap():
    rec = record([((0, 0), (0, 2)), ((1, 1), (2, 1))])
    # Agent 2 moves down while agent 1 passes on row 0: different edges.
    v = verdict(rec, format_answer([[(0, 0), (0, 1), (0, 2)], [(1, 1), (2, 1)]]))
    assert v.valid


def test_conflicts_with_three_agents():
    rec = record([((0, 0), (2, 0)), ((0, 2), (2, 2)), ((1, 1), (0, 1))])
    good = [[(0, 0), (1, 0), (2, 0)], [(0, 2), (1, 2), (2, 2)], [(1, 1), (0, 1)]]
    assert verdict(rec, format_answer(good)).valid
    bad = [good[0], [(0, 2), (0, 1), (0, 0), (1, 0), (2, 0), (2, 1), (2, 2)], good[2]]
    assert verdict(rec, format_answer(bad)).failed_checks == ("conflict",)


# ----------------------------------------------------------------------------- cost


def test_trailing_waits_cost_nothing():
    v = verdict(HOLE_RECORD, format_answer([P1 + [(0, 2)] * 5, P2 + [(2, 2)]]))
    assert v.valid and v.cost == 4 and v.optimal


def test_cost_counts_waits_before_arrival_and_returns_to_goal():
    v = verdict(HOLE_RECORD, format_answer([[(0, 0), (0, 0), (0, 1), (0, 2)], P2]))
    assert v.valid and v.cost == 5 and not v.optimal
    v = verdict(HOLE_RECORD, format_answer([[(0, 0), (0, 1), (0, 2), (1, 2), (0, 2), (0, 2)], P2]))
    assert v.valid and v.cost == 6 and not v.optimal


def test_solution_cost():
    goals = [(0, 2), (2, 2)]
    assert solution_cost([P1, P2], goals) == 4
    assert solution_cost({2: P2, 1: P1 + [(0, 2)]}, goals) == 4
    assert solution_cost([[[0, 0], [0, 1], [0, 2]], P2], [[0, 2], [2, 2]]) == 4
    with pytest.raises(ValueError):
        solution_cost([P1[:-1], P2], goals)
    with pytest.raises(ValueError):
        solution_cost([P1], goals)


# -------------------------------------------------------------------------- parsing


def test_round_trip_of_format_answer():
    text = format_answer([P1, P2])
    assert text == "<answer>\nAgent 1: (0,0) -> (0,1) -> (0,2)\nAgent 2: (2,0) -> (2,1) -> (2,2)\n</answer>"
    assert parse_answer(text) == ParsedAnswer({1: tuple(P1), 2: tuple(P2)}, None, (1, 2))
    with pytest.raises(ValueError):
        format_answer([P1, []])


@given(st.integers(3, 10), st.data())
@settings(max_examples=150, deadline=None)
def test_round_trip_on_random_solutions(n, data):
    # Agent i walks along row i from column 0, so no two agents ever meet.
    lengths = data.draw(st.lists(st.integers(2, n), min_size=1, max_size=min(5, n)))
    paths = [[(i, c) for c in range(length)] + [(i, length - 1)] * data.draw(st.integers(0, 2))
             for i, length in enumerate(lengths)]
    rec = record([(p[0], p[-1]) for p in paths], grid=["F" * n] * n, optimal_cost=sum(lengths) - len(lengths))
    text = format_answer(paths)
    assert parse_answer(text).paths == {i + 1: tuple(p) for i, p in enumerate(paths)}
    v = verdict(rec, text)
    assert v.valid and v.optimal and v.cost == sum(lengths) - len(lengths)


def test_only_text_after_the_last_think_is_read():
    good = format_answer([P1, P2])
    bad = format_answer([P1])
    assert verdict(HOLE_RECORD, f"<think>{bad}</think>{good}").valid
    assert verdict(HOLE_RECORD, f"<think>a</think> x </think>\n{good}").valid
    assert verdict(HOLE_RECORD, f"{good}</think>no answer after thinking").failure == "parse"
    assert verdict(HOLE_RECORD, f"{good}<think>unfinished thoughts").valid  # no </think>: read it all


def test_the_last_answer_block_wins():
    good = format_answer([P1, P2])
    bad = format_answer([P1])
    assert verdict(HOLE_RECORD, f"{bad}\n{good}").valid
    assert verdict(HOLE_RECORD, f"{good}\n{bad}").failure == "agent_count"
    # An unclosed block after a closed one: the closed one is the last block.
    assert verdict(HOLE_RECORD, f"{good}\n<answer>\nAgent 1: (5,5)").valid


def test_inside_a_block_only_agent_lines_count():
    text = (
        "<answer>\nHere is the plan.\n\n  Agent 1 :(0,0)->(0,1),(0,2)  \n"
        "Agent 2 waits: no\r\nAgent 2:( 2 , 0 ) (2,1) -> -> (2,2) ->\r\n</answer>"
    )
    # "Agent 2 waits: no" is not an agent line (no number right after "Agent").
    assert verdict(HOLE_RECORD, text).valid


def test_without_a_block_agent_lines_are_read_from_the_whole_text():
    text = "Sure. The plan:\nAgent 1: (0,0) -> (0,1) -> (0,2)\nthen\nAgent 2: (2,0) -> (2,1) -> (2,2)\nDone."
    assert verdict(HOLE_RECORD, text).valid
    assert verdict(HOLE_RECORD, "<answer>\n" + text).valid  # unclosed tag: no block
    assert verdict(HOLE_RECORD, text + "\nAgent 1: (0,0)").failure == "agent_count"
    assert verdict(HOLE_RECORD, text + "\nAgent 3: absent").failure == "parse"
    assert verdict(HOLE_RECORD, text + "\nAgent 3 is absent: sorry").valid  # not an agent line


def test_text_around_cells_is_a_parse_failure_but_separators_are_free():
    assert parse_answer("Agent 1: (0,0)(0,1) , (0,2)->(1,2)").paths == {1: ((0, 0), (0, 1), (0, 2), (1, 2))}
    for line in ["Agent 1: path (0,0)", "Agent 1: (0,0) done", "Agent 1: (0,0) -->(0,1)", "Agent 1: (0,0) ->>(0,1)",
                 "Agent 1: (0,0) > (0,1)", "Agent 1: (0,0) ; (0,1)", "Agent 1: (0,0) -", "Agent 1: ((0,0))",
                 "Agent 1: (+1,0)", "Agent 1: (- 1,0)", "Agent 1: (0,0)\x00"]:
        assert parse_answer(line).paths is None, line


def test_non_string_response_is_a_parse_failure():
    assert verdict(HOLE_RECORD, None).failure == "parse"  # type: ignore[arg-type]
    assert verdict(HOLE_RECORD, b"Agent 1: (0,0)").failure == "parse"  # type: ignore[arg-type]


@given(st.lists(st.sampled_from(["<answer>", "</answer>", "x", "\n", "Agent 1: (0,0)"]), max_size=12))
@settings(max_examples=400, deadline=None)
def test_block_pairing_matches_lazy_regex(pieces):
    text = "".join(pieces)
    blocks = re.findall(r"<answer>(.*?)</answer>", text, re.S)
    assert answer_module._answer_region(text) == (blocks[-1] if blocks else text)


# ------------------------------------------------------------------------ validator


def test_validator_component():
    v = MapfValidator()
    assert isinstance(v, Validator)
    assert v.name == "mapf-frozenlake"
    assert v.failure_types == FAILURE_TYPES == (
        "parse", "agent_count", "start", "out_of_bounds", "illegal_move", "hole", "conflict", "goal",
    )


def test_score_instance_matches_the_validator():
    instance = from_record(HOLE_RECORD)
    for text in [format_answer([P1, P2]), format_answer([P1]), "junk"]:
        assert score_instance(instance, text) == verdict(HOLE_RECORD, text)
        assert MapfValidator().score(instance, text) == verdict(HOLE_RECORD, text)


def test_cache_is_keyed_by_content_not_only_id():
    v = MapfValidator()
    text = format_answer([P1, P2])
    assert v.score(HOLE_RECORD, text).optimal
    assert not v.score({**HOLE_RECORD, "optimal_cost": 3}, text).optimal
    moved = {**HOLE_RECORD, "agents": [{"start": [0, 0], "goal": [0, 1]}, HOLE_RECORD["agents"][1]]}
    assert v.score(moved, text).failure == "goal"
    assert v.score(HOLE_RECORD, text).optimal


def test_malformed_record_raises_value_error():
    with pytest.raises(ValueError):
        MapfValidator().score({"size": 3, "grid": [["F"]], "agents": []}, "x")


# ------------------------------------------------------------- reference and fuzzing


def naive_failed_checks(rec, paths, numbers):
    """The contract read literally, with plain loops (agents 1..k that have a line)."""
    inst = from_record(rec)
    n, k = inst.size, inst.k
    failed = set()
    if sorted(numbers) != list(range(1, k + 1)):
        failed.add("agent_count")
    present = {i: paths[i] for i in range(1, k + 1) if i in paths}
    for i, p in present.items():
        agent = inst.agents[i - 1]
        if p[0] != agent.start:
            failed.add("start")
        if p[-1] != agent.goal:
            failed.add("goal")
        for r, c in p:
            if not (0 <= r < n and 0 <= c < n):
                failed.add("out_of_bounds")
            elif inst.grid[r][c] == "H":
                failed.add("hole")
        for (r0, c0), (r1, c1) in zip(p, p[1:]):
            if abs(r1 - r0) + abs(c1 - c0) > 1:
                failed.add("illegal_move")
    horizon = max((len(p) for p in present.values()), default=0)
    at = lambda p, t: p[min(t, len(p) - 1)]  # noqa: E731
    agents = list(present.values())
    for a in range(len(agents)):
        for b in range(a + 1, len(agents)):
            p, q = agents[a], agents[b]
            for t in range(horizon):
                if at(p, t) == at(q, t):
                    failed.add("conflict")
                if t + 1 < horizon and at(p, t) == at(q, t + 1) and at(p, t + 1) == at(q, t) and at(p, t) != at(p, t + 1):
                    failed.add("conflict")
    return tuple(name for name in FAILURE_TYPES if name in failed)


small_cell = st.tuples(st.integers(-1, 4), st.integers(-1, 4))


@given(
    grid=st.lists(st.text("FFFH", min_size=4, max_size=4), min_size=4, max_size=4),
    k=st.integers(1, 3),
    lines=st.lists(st.tuples(st.integers(0, 4), st.lists(small_cell, min_size=1, max_size=7)), min_size=1, max_size=5),
    data=st.data(),
)
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_validator_matches_a_naive_reading_of_the_contract(grid, k, lines, data):
    free = [(r, c) for r in range(4) for c in range(4) if grid[r][c] == "F"]
    if len(free) < 2 * k:
        return
    chosen = data.draw(st.permutations(free))[: 2 * k]
    rec = record([(chosen[2 * i], chosen[2 * i + 1]) for i in range(k)], grid=grid)
    # Bias towards answers that are nearly right: start agents on their starts.
    lines = [(num, [chosen[2 * (num - 1)]] + cells if 1 <= num <= k and data.draw(st.booleans()) else cells)
             for num, cells in lines]
    text = "<answer>\n" + "\n".join(f"Agent {num}: " + " -> ".join(f"({r},{c})" for r, c in cells)
                                      for num, cells in lines) + "\n</answer>"
    paths = {}
    for num, cells in lines:
        paths[num] = tuple(cells)
    expected = naive_failed_checks(rec, paths, [num for num, _ in lines])
    v = verdict(rec, text)
    assert v.failed_checks == expected
    assert v.valid == (expected == ())
    if v.valid:
        assert v.cost == solution_cost([paths[i] for i in range(1, k + 1)], [tuple(a["goal"]) for a in rec["agents"]])


def assert_well_formed(v):
    assert isinstance(v, Verdict)
    assert v.valid == (v.failure is None) == (v.failed_checks == ())
    assert set(v.failed_checks) <= set(FAILURE_TYPES)
    assert list(v.failed_checks) == sorted(v.failed_checks, key=FAILURE_TYPES.index)
    if not v.valid:
        assert v.failure == v.failed_checks[0] and v.cost is None and not v.optimal
    if "parse" in v.failed_checks:
        assert v.failed_checks == ("parse",)


@given(st.text())
@settings(max_examples=300, deadline=None)
def test_score_never_raises_on_arbitrary_text(text):
    assert_well_formed(verdict(HOLE_RECORD, text))
    assert isinstance(parse_answer(text), ParsedAnswer)


answerish = st.lists(
    st.sampled_from(["Agent", " ", "1", "2", "3", ":", "(", ")", ",", "-", ">", "->", "\n", "0", "99", "-1",
                     "<answer>", "</answer>", "</think>", "x", "\r", "\t", "\x00", "\u2028"]),
    max_size=60,
).map("".join)


@given(answerish)
@settings(max_examples=500, deadline=None)
def test_score_never_raises_on_answer_like_text(text):
    assert_well_formed(verdict(HOLE_RECORD, text))


@given(st.data())
@settings(max_examples=400, deadline=None)
def test_score_never_raises_on_mutated_valid_answers(data):
    text = format_answer([P1, P2])
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        op = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        piece = data.draw(st.text(alphabet="()-,>0123456789 \nAgent:<>/answer", max_size=4))
        if op == "insert":
            text = text[:i] + piece + text[i:]
        elif op == "delete":
            text = text[:i] + text[i + len(piece) + 1 :]
        else:
            text = text[:i] + piece + text[i + len(piece) :]
    assert_well_formed(verdict(HOLE_RECORD, text))


@given(st.lists(st.one_of(answerish, st.text(max_size=8)), min_size=1, max_size=20))
@settings(max_examples=300, deadline=None)
def test_batch_and_per_line_parsing_agree(bodies):
    bodies = [b.replace("\n", " ") for b in bodies]
    text = "\n".join(f"Agent {i % 4}: {b}" for i, b in enumerate(bodies))
    per_line = [answer_module._parse_cells(answer_module._HEADER.match(line).group(2)) for line in text.split("\n")]
    bad = next((i for i, cells in enumerate(per_line) if isinstance(cells, str)), None)
    assert answer_module._first_bad_line([answer_module._HEADER.match(line).group(2) for line in text.split("\n")]) == bad
    original = answer_module._BATCH
    try:
        answer_module._BATCH = 0
        batch = parse_answer(text)
        answer_module._BATCH = 10**9
        single = parse_answer(text)
    finally:
        answer_module._BATCH = original
    assert batch == single


def test_read_answer_keeps_only_the_agents_asked_for():
    text = "\n".join(f"Agent {i}: ({i},0)" for i in range(20))
    parsed = read_answer(text, range(1, 3))
    assert parsed.paths == {1: ((1, 0),), 2: ((2, 0),)}
    assert parsed.agent_numbers == tuple(range(20))
    assert read_answer(text + "\nAgent 7: oops", range(1, 3)).paths is None


# ------------------------------------------------------------------ 1 MB responses


@pytest.mark.parametrize(
    ("text", "failed"),
    [
        (random.Random(0).randbytes(MB).decode("latin-1"), ("parse",)),
        ("(1,1) -> " * (MB // 9), ("parse",)),
        ("<answer><think>" * (MB // 15), ("parse",)),
        ("<answer>" * (MB // 8) + "</answer>", ("parse",)),
        ("<answer>Agent 1: (" + "9" * MB + ",1)</answer>", ("agent_count", "start", "out_of_bounds", "goal")),
        ("Agent " + "9" * MB + ": (0,0)", ("agent_count",)),
        ("Agent 1: (0," + " " * MB + "x)", ("parse",)),
        ("Agent 1: (0,0) -> (0,1)\n" * (MB // 24), ("agent_count", "goal")),
        ("".join(f"Agent {i}: ({i % 3},{i % 3})\n" for i in range(MB // 20)), ("agent_count", "start", "hole", "goal")),
        (
            "<answer>\nAgent 1: " + "(0,0) -> " * (MB // 18) + "(0,1) -> (0,2)\nAgent 2: "
            + "(2,0) -> " * (MB // 18) + "(2,1) -> (2,2)\n</answer>",
            (),
        ),
    ],
    ids=["random-bytes", "cells-without-agent", "unclosed-tags", "unclosed-then-close", "giant-coordinate",
         "giant-agent-number", "whitespace-run", "repeated-line", "distinct-lines", "long-valid-paths"],
)
def test_one_megabyte_responses(text, failed):
    v = verdict(HOLE_RECORD, text)
    assert v.failed_checks == failed
    assert_well_formed(v)


def test_a_record_without_optimal_cost_is_certified_on_demand():
    from envengineer.tasks.mapf_frozenlake.answer import format_answer
    from envengineer.tasks.mapf_frozenlake.validator import MapfValidator

    record = {"id": "ext-1", "size": 3, "grid": ["FFF", "FHF", "FFF"],
              "agents": [{"start": [0, 0], "goal": [0, 2]}, {"start": [0, 2], "goal": [0, 0]}]}
    validator = MapfValidator()
    detour = format_answer([[(0, 0), (0, 1), (0, 2)], [(0, 2), (1, 2), (2, 2), (2, 1), (2, 0), (1, 0), (0, 0)]])
    best = format_answer([[(0, 0), (1, 0), (2, 0), (2, 1), (2, 2), (1, 2), (0, 2)], [(0, 2), (0, 1), (0, 0)]])
    verdict = validator.score(record, detour)
    assert verdict.valid and verdict.cost == 8 and verdict.optimal
    assert validator.score(record, best).optimal
    slow = format_answer([[(0, 0), (0, 0), (0, 1), (0, 2)], [(0, 2), (1, 2), (2, 2), (2, 1), (2, 0), (1, 0), (0, 0)]])
    verdict = validator.score(record, slow)
    assert verdict.valid and verdict.cost == 9 and not verdict.optimal


def test_a_record_without_optimal_cost_is_certified_within_a_work_budget(monkeypatch):
    """The validator certifies a foreign record's optimum on demand within CERTIFY_WORK solver units (not
    seconds): the same verdict on every machine; past the budget the answer is valid but not optimal."""
    from envengineer.tasks.mapf_frozenlake import validator as validator_module
    from envengineer.tasks.mapf_frozenlake.solver import solve

    grid = ["FFFFFFFFFF", "FHFHFHHFFH", "FFFFHFFFFF", "HFFHFFFHHF", "FFFFHFFFFF",
            "FFFFHFHFFF", "FFFFHFFFFF", "FFFHFFFFFF", "HFFHFFFHFH", "FFFHFFFFFF"]
    agents = [((4, 9), (9, 0)), ((3, 6), (4, 9)), ((7, 9), (9, 4)), ((8, 8), (4, 0)), ((8, 1), (5, 5))]
    solution = solve(grid, agents)
    assert solution.status == "optimal" and 16 < solution.work < validator_module.CERTIFY_WORK
    answer = format_answer([list(p) for p in solution.paths])
    v = verdict(record(agents, grid=grid, id="foreign"), answer)
    assert v.valid and v.optimal and v.cost == solution.cost
    monkeypatch.setattr(validator_module, "CERTIFY_WORK", 16)
    v = verdict(record(agents, grid=grid, id="foreign-2"), answer)
    assert v.valid and not v.optimal and v.cost == solution.cost
