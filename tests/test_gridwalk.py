"""The grid-walk family (the frontier testbed): the conformance kit, determinism, the validator on
hostile and near-miss answers, the frozen sets' checksums, and its tiny-policy hooks."""

import hashlib
import json

import pytest

from envengineer.registry import load_registry
from envengineer.tasks.gridwalk.benchmarks import BEYOND, TARGET, VALIDATION, untrained_lengths
from envengineer.tasks.gridwalk.knobs import GROUPS, moves_of
from envengineer.tasks.gridwalk.walk import cells_text, make_record, solve
from envengineer.testing import assert_task_conforms


@pytest.fixture(scope="module")
def task():
    registry = load_registry(entry_points=False)
    return registry.task("grid-walk", {"prompt_style": "compact"})


def test_grid_walk_conforms():
    assert_task_conforms("grid-walk", {"prompt_style": "compact"}, n=24, fuzz=200)
    assert_task_conforms("grid-walk", {"prompt_style": "full"}, n=12, fuzz=50)


def test_walks_stay_on_the_grid_and_match_the_solver(task):
    generator, validator = task
    records = generator.generate(generator.default_config(), n=400, seed=3).records
    assert len(records) == 400
    assert {generator.group(r) for r in records} == set(GROUPS)
    for r in records:
        assert len(r["moves"]) == r["k"] == int(r["group"][1:])
        assert all(0 <= v < r["size"] for cell in [r["start"], *r["path"]] for v in cell)
        assert r["path"] == solve(r)
        # each step moves one cell
        cells = [r["start"], *r["path"]]
        assert all(abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1 for a, b in zip(cells, cells[1:]))


def test_same_config_and_seed_same_records_and_shares_follow_the_config(task):
    generator, _ = task
    cfg = generator.project({"groups": {"k5": {"ratio": 0.9}, "k6": {"size": 3}}}, generator.default_config()).config
    a = generator.generate(cfg, n=300, seed=11).records
    b = generator.generate(cfg, n=300, seed=11).records
    assert json.dumps(a) == json.dumps(b)
    assert json.dumps(a) != json.dumps(generator.generate(cfg, n=300, seed=12).records)
    counts = {g: sum(generator.group(r) == g for r in a) for g in GROUPS}
    assert counts["k5"] > 200 and sum(counts.values()) == 300
    assert {r["size"] for r in a if r["group"] == "k6"} == {3}
    # a share move keeps a group's first instances (seeded on group, size and index)
    more = generator.project({"groups": {"k7": {"ratio": 0.5}}}, generator.default_config()).config
    first = [r for r in generator.generate(generator.default_config(), n=400, seed=5).records if r["group"] == "k7"]
    again = [r for r in generator.generate(more, n=400, seed=5).records if r["group"] == "k7"]
    assert again[: len(first)] == first


def test_compact_prompt_and_answer_format(task):
    generator, validator = task
    record = make_record("doc", 5, 4)
    prompt = generator.render(record, "compact")
    assert prompt.startswith("G5 ") and prompt.endswith(" =") and len(prompt.split()) == 4 + 3
    answer = generator.reference_completion(record, "compact")
    assert len(answer.split()) == 4
    assert validator.score(record, generator.decode_response(record, answer, "compact")).valid
    vocabulary = set(generator.tiny_vocabulary("compact"))
    assert set(prompt.split()) <= vocabulary and set(answer.split()) <= vocabulary
    full = generator.render(record, "full")[0]["content"]
    assert "<answer>" in full and f"{record['start'][0]}_{record['start'][1]}" in full


@pytest.mark.parametrize(("mutate", "failure"), [
    (lambda cells: cells[:-1], "length"),                       # one cell short
    (lambda cells: cells + cells[-1:], "length"),               # one cell too many
    (lambda cells: cells[:-1] + ["9_9"], "wrong"),              # last cell off the grid
    (lambda cells: list(reversed(cells)), "wrong"),             # right cells, wrong order (k >= 2, a walk never stays)
    (lambda cells: [c.replace("_", ",") for c in cells], "parse"),
    (lambda cells: [], "parse"),
    (lambda cells: cells[:1] + ["-1_2"] + cells[2:], "parse"),  # a negative cell
])
def test_the_validator_refuses_near_misses(task, mutate, failure):
    generator, validator = task
    record = make_record("near-miss", 4, 6)
    cells = cells_text(solve(record)).split()
    if cells == list(reversed(cells)):
        pytest.skip("palindromic walk")
    verdict = validator.score(record, f"<answer>{' '.join(mutate(cells))}</answer>")
    assert not verdict.valid and verdict.failure == failure and verdict.score == 0.0


def test_the_validator_reads_the_last_answer_and_never_the_record_path(task):
    generator, validator = task
    record = make_record("last", 6, 5)
    right = cells_text(solve(record))
    assert validator.score(record, f"<answer>0_0</answer> then <answer>{right}</answer>").valid
    assert not validator.score(record, f"<answer>{right}</answer><answer>0_0</answer>").valid
    forged = {**record, "path": [[0, 0]] * record["k"]}  # a tampered path field is ignored: the answer is recomputed
    assert validator.score(forged, f"<answer>{right}</answer>").valid


def test_bad_records_and_groups_are_named(task):
    generator, _ = task
    record = make_record("bad", 5, 3)
    for field, value in (("size", 99), ("moves", "UXD"), ("start", [7, 0]), ("moves", "UD")):
        with pytest.raises(ValueError, match=field):
            generator.check_record({**record, field: value})
    with pytest.raises(ValueError, match="k11"):
        moves_of("k11")


def test_frozen_sets_match_their_checksums_and_rebuild_identically():
    registry = load_registry(entry_points=False)
    sizes = {}
    for name in (VALIDATION, TARGET, BEYOND):
        spec = registry.benchmark(name)
        data = spec.path.read_bytes()
        assert hashlib.sha256(data).hexdigest() == spec.sha256
        built = "".join(json.dumps(r) + "\n" for r in spec.build())
        assert hashlib.sha256(built.encode()).hexdigest() == spec.sha256
        sizes[name] = [json.loads(line) for line in data.decode().splitlines()]
    val, target = sizes[VALIDATION], sizes[TARGET]
    assert len(val) == 240 and {r["k"] for r in val} == set(range(3, 9))
    assert len(target) == 400 and {r["k"] for r in target} == {9, 10}
    assert len({r["id"] for r in val}) == 240 and len({r["id"] for r in target}) == 400
    # the never-trained target: lengths outside the knob table (no config can ask for them) and every warm start
    beyond = sizes[BEYOND]
    assert len(beyond) == 400 and {r["k"] for r in beyond} == set(untrained_lengths()) == {11, 12}
    assert len({r["id"] for r in beyond}) == 400 and {r["size"] for r in beyond} == set(range(3, 8))
    assert not {r["group"] for r in beyond} & set(GROUPS) and max(moves_of(g) for g in GROUPS) < 11


def test_warm_start_draws_short_walks_and_a_thin_tail():
    registry = load_registry(entry_points=False)
    generator, _ = registry.task("grid-walk", {"prompt_style": "compact", "warm_start_max_moves": 4, "warm_start_long_share": 0.05})
    pairs = generator.warm_start_pairs(n=4000, seed=0, style="compact")
    lengths = [len(answer.split()) for _, answer in pairs]
    long = sum(k > 4 for k in lengths)
    assert 150 <= long <= 250 and max(lengths) <= 10 and min(lengths) == 1
    assert generator.warm_start_recipe() == {"warm_start_max_moves": 4, "warm_start_long_share": 0.05}
    none, _ = registry.task("grid-walk", {"prompt_style": "compact", "warm_start_long_share": 0})
    assert max(len(a.split()) for _, a in none.warm_start_pairs(n=500, seed=0, style="compact")) == 4
    assert pairs == generator.warm_start_pairs(n=4000, seed=0, style="compact")
