"""The training signal: rollouts.jsonl's lines, their aggregation by grouping, and kept_prompts filling."""

import json

import pytest

from envengineer.errors import InputError
from envengineer.loop.signal import aggregate, check_line, group_success, rollout_line
from envengineer.components.training import TrainRequest, fill_kept


@pytest.fixture
def mapf(registry):
    return registry.create("generator", "mapf-frozenlake", {}, where="task")


def test_a_line_counts_every_sample(registry):
    line = rollout_line("a", [1.0, 0.0, 0.0, 1.0], [True, False, False, True], kept=True, groups=[[1, 0, 0, 1]])
    assert line == {"id": "a", "samples": 4, "valid": 2, "score": 0.5, "kept": True, "groups": [[1.0, 0.0, 0.0, 1.0]]}
    assert check_line(line, "x") == line


@pytest.mark.parametrize("bad, message", [
    ([], "expected a JSON object"),
    ({"id": "a", "samples": 2}, "missing valid, score, kept, groups"),
    ({"id": "a", "samples": 2, "valid": 3, "score": 0, "kept": True, "groups": []}, "0 <= valid <= samples"),
    ({"id": "a", "samples": "2", "valid": 1, "score": 0, "kept": True, "groups": []}, "counts"),
])
def test_a_malformed_line_is_refused_by_name(bad, message):
    with pytest.raises(InputError, match=f"rollouts.jsonl:3: .*{message}"):
        check_line(bad, "rollouts.jsonl:3")


def test_aggregate_files_prompts_by_every_grouping_in_the_tasks_order(mapf):
    records = mapf.generate(mapf.default_config(), n=40, seed=3).records
    lines = []
    for i, record in enumerate(records):
        valid = [True] * 4 if record["size"] == 3 else ([True, False, False, False] if record["size"] == 4 else [False] * 4)
        lines.append(rollout_line(record["id"], [float(v) for v in valid], valid, kept=record["size"] == 4))
    lines.append(rollout_line("not-in-the-round", [1.0], [True], kept=False))
    signal = aggregate(lines, records, mapf)
    assert list(signal["by"]) == ["size", "hole_ratio"]
    sizes = signal["by"]["size"]
    assert list(sizes) == ["3x3", "4x4", "5x5", "6x6", "7x7", "8x8", "9x9", "10x10"]
    assert sizes["3x3"]["success"] == 1.0 and sizes["3x3"]["all_right"] == 5 and sizes["3x3"]["mixed_share"] == 0.0
    assert sizes["4x4"]["success"] == 0.25 and sizes["4x4"]["mixed"] == 5 and sizes["4x4"]["kept"] == 5
    assert sizes["4x4"]["learnability"] == pytest.approx(5 * 0.25 * 0.75)
    assert sizes["9x9"]["all_wrong"] == 5 and sizes["9x9"]["success"] == 0.0
    assert signal["overall"]["prompts"] == 41 and signal["unmatched"] == 1
    assert group_success(signal) == sizes and group_success(signal, "nothing") == {}
    assert group_success({}) == {}


def test_a_cell_counts_grpos_rollouts_apart_from_the_prefilters(mapf):
    """grpo_samples and grpo_right read only the lines' GRPO groups: a prefilter's samples (in samples and
    valid, not in groups) never reach them; a reward of at least 1 is right (R_acc's 1, 1 plus a bonus)."""
    records = mapf.generate(mapf.default_config(), n=16, seed=3).records
    first, second = records[0], records[1]
    lines = [
        # 4 prefilter samples (3 valid), then two GRPO groups of 4: 2 + 1 right (1.5: valid with a bonus; 0.5: a partial score)
        rollout_line(first["id"], [1, 1, 1, 0, 1, 0, 1.5, 0, 0.5, 0, 0, 1], [True] * 3 + [False, True, False, True, False, False, False, False, True],
                     kept=True, groups=[[1, 0, 1.5, 0], [0.5, 0, 0, 1]]),
        rollout_line(second["id"], [1.0, 1.0], [True, True], kept=False),  # screened out: no GRPO rollout
    ]
    overall = aggregate(lines, records, mapf)["overall"]
    assert (overall["samples"], overall["valid"]) == (14, 8)
    assert (overall["grpo_samples"], overall["grpo_right"]) == (8, 3)


def _request(records, **fields):
    return TrainRequest(policy_path=None, records=records, generator=None, validator=None, out_dir=None, **fields)


def test_fill_kept_in_instances_mode_judges_the_round_once():
    records = [{"id": str(i)} for i in range(10)]
    drawn = fill_kept(_request(records), lambda batch: [([1.0, 0.0], [True, False]) if int(r["id"]) % 2 else ([0.0, 0.0], [False, False]) for r in batch])
    assert [drawn.records[i]["id"] for i in drawn.kept] == ["1", "3", "5", "7", "9"]
    assert drawn.info == {"budget_mode": "instances", "judged": 10, "kept": 5}


def test_fill_kept_draws_until_the_target_and_records_the_cap():
    calls = []

    def draw(n, part):
        calls.append((n, part))
        return [{"id": f"{part}-{i}"} for i in range(n)]

    mixed_every_third = lambda batch: [([1.0, 0.0], [True, False]) if i % 3 == 0 else ([1.0, 1.0], [True, True]) for i, _ in enumerate(batch)]  # noqa: E731
    records = [{"id": f"0-{i}"} for i in range(6)]
    drawn = fill_kept(_request(records, budget_mode="kept_prompts", kept_target=5, max_draws=60, draw=draw), mixed_every_third)
    assert len(drawn.kept) == 5 and calls == [(6, 1), (6, 2)] and drawn.info["capped"] is False
    assert drawn.info["judged"] == 18 and drawn.info["draws"] == 3
    capped = fill_kept(_request(records, budget_mode="kept_prompts", kept_target=50, max_draws=15, draw=draw), mixed_every_third)
    assert capped.info == {"budget_mode": "kept_prompts", "judged": 15, "kept": 5, "kept_target": 50, "max_draws": 15, "capped": True, "draws": 3}


def test_the_loop_writes_signal_json_from_the_trainers_rollouts(tmp_path, registry):
    from envengineer.loop.steps import run

    config = tmp_path / "sim.yaml"
    config.write_text("name: sim\nrounds: 2\nbudget: 40\ntask: {name: mapf-frozenlake}\nengineer: fixed\n"
                      "policy: simulated\ntrainer: simulated\neval: {limit: 48}\n")
    run(config, registry=registry, output=str(tmp_path / "run"))
    folder = tmp_path / "run" / "round-00" / "train"
    lines = [json.loads(x) for x in (folder / "rollouts.jsonl").read_text().splitlines()]
    signal = json.loads((folder / "signal.json").read_text())
    assert len(lines) == 40 and signal["overall"]["prompts"] == 40
    assert signal["overall"]["samples"] == sum(line["samples"] for line in lines)
    assert sum(c["prompts"] for c in signal["by"]["size"].values()) == 40
