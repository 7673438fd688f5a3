"""The optional per-size ``agents`` knob of mapf-frozenlake (task option ``agents_range``).

Off (the default, the paper's setting): the config model, knobs, projection, prompts and
records are those of the task without the option, byte for byte; the pins below were taken
before the option existed. On: each size has its own agent count, which the projection
keeps whole, in range and fitting the map (2k + 1 free cells), and generation follows.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pytest
import yaml

from envengineer.errors import ConfigError
from envengineer.store.configs import load_generator_config
from envengineer.tasks.mapf_frozenlake import SIZE_NAMES
from envengineer.tasks.mapf_frozenlake.knobs import MapfConfig, agents_fitting, fit_free_cells, hole_count
from envengineer.testing import assert_task_conforms, fuzz_proposals, load_task, records_digest

ON = {"agents": 2, "agents_range": [2, 5]}


def _task(options):
    return load_task("mapf-frozenlake", options)[0]


def _projections_digest(generator, count=40, seed=1):
    current = generator.default_config()
    out = []
    for proposal in fuzz_proposals(generator, current, count, seed):
        projection = generator.project(proposal, current)
        out.append([projection.config.model_dump(mode="json"), [repr(c) for c in projection.changes], list(projection.accepted)])
    return hashlib.sha256(json.dumps(out).encode()).hexdigest()


def _counts(records):
    return Counter((r["size"], len(r["agents"])) for r in records)


# ------------------------------------------------------------------ off: exactly today


#: Taken before the option existed (default options): records, projections, G text and brief, random configs.
PINS = {
    "records_n16_seed0": "e9105cbfdde783fe9d6c789d659c99601f4350ab557932b52247eb7422cf8163",
    "records_n16_seed1": "4bf6082d4c359ef02107d92151ab2941c1931e15eb7ce674da313e60a903d8c8",
    "projections": "b73f941071a69a286ad0e165da5c90abb7b3c7c257b729e4b05d449cdee8433d",
    "text": "7d46fb32669d6142018d9d808760cc0a2c7c1d9f85b2d8e40d9a585e637b4247",
    "random": "31afa4438fca1800cecd81fd1c66b3f6e1172bbfd9622438de591b49a31e8e76",
}


@pytest.mark.parametrize("options", [{}, {"agents_range": None}])
def test_off_is_the_task_as_it_was(options):
    generator = _task(options)
    assert generator.config_model is MapfConfig
    assert [k.name for k in generator.knobs] == ["ratio", "hole_ratio", "wait_ratio"]
    default = generator.default_config()
    assert all("agents" not in knobs for knobs in default.to_yaml_dict()["sizes"].values())
    assert records_digest(generator.generate(default, n=16, seed=0).records) == PINS["records_n16_seed0"]
    assert records_digest(generator.generate(default, n=16, seed=1).records) == PINS["records_n16_seed1"]
    assert _projections_digest(generator) == PINS["projections"]
    assert hashlib.sha256((generator.guidelines() + generator.design_brief(100)).encode()).hexdigest() == PINS["text"]
    random_configs = [generator.random_config(s).model_dump(mode="json") for s in range(3)]
    assert hashlib.sha256(json.dumps(random_configs).encode()).hexdigest() == PINS["random"]


@pytest.mark.parametrize("agents, seed", [(2, 3), (3, 0)])
def test_off_matches_the_option_absent_on_other_configs(agents, seed):
    absent, off = _task({"agents": agents}), _task({"agents": agents, "agents_range": None})
    config = absent.random_config(seed)
    assert config.model_dump() == off.random_config(seed).model_dump()
    assert records_digest(absent.generate(config, n=12, seed=seed).records) == records_digest(off.generate(config, n=12, seed=seed).records)
    proposal = {"sizes": {"4x4": {"agents": 4, "hole_ratio": 0.6}}}
    a, b = absent.project(proposal, config), off.project(proposal, config)
    assert a == b and "agents" not in a.config.model_dump()["sizes"]["4x4"]
    assert any(c.field == "sizes.4x4.agents" and c.applied is None for c in a.changes)  # an unknown knob, as ever
    assert "agents:" not in absent.guidelines() and "agents knob" not in absent.design_brief()


# ------------------------------------------------------------------ on: the knob


def test_on_declares_the_knob_and_adds_the_field():
    generator = _task(ON)
    knob = generator.knob("agents")
    assert (knob.low, knob.high, knob.step, knob.integer, knob.harder) == (2, 5, 1, True, "up")
    assert knob in generator.difficulty_knobs()
    assert _task({}).knobs == type(generator).knobs  # the class's declaration is untouched
    default = generator.default_config()
    assert {name: k["agents"] for name, k in default.to_yaml_dict()["sizes"].items()} == dict.fromkeys(SIZE_NAMES, 2)
    # the other knobs are the default config's without the option
    stripped = {name: {k: v for k, v in knobs.items() if k != "agents"} for name, knobs in default.to_yaml_dict()["sizes"].items()}
    assert stripped == _task({}).default_config().to_yaml_dict()["sizes"]
    assert generator.instance_knobs(generator.generate(default, n=1, seed=0).records[0])["agents"] == 2.0


def test_on_projection_keeps_counts_whole_in_range_and_fitting():
    generator = _task(ON)
    current = generator.default_config()
    proposal = {"sizes": {"3x3": {"agents": 5, "hole_ratio": 0.3}, "4x4": {"agents": "3.4"}, "5x5": {"agents": 3},
                          "6x6": {"agents": 9}, "7x7": {"agents": 1}, "8x8": {"agents": "many"}, "9x9": {"agents": 4, "hole_ratio": 0.5}}}
    projection = generator.project(proposal, current)
    changes = {c.field: c for c in projection.changes}
    sizes = projection.config.sizes
    assert sizes["3x3"].agents == 4 and "room for at most 4 agents" in changes["sizes.3x3.agents"].reason
    assert sizes["3x3"].hole_ratio == 0.0 and "4 agents need 9 free cells" in changes["sizes.3x3.hole_ratio"].reason
    assert sizes["4x4"].agents == 3 and "rounded" in changes["sizes.4x4.agents"].reason
    assert sizes["5x5"].agents == 3 and "sizes.5x5.agents" in projection.accepted
    assert sizes["6x6"].agents == 5 and "outside the agents range [2, 5]" in changes["sizes.6x6.agents"].reason
    assert sizes["7x7"].agents == 2 and "outside the agents range" in changes["sizes.7x7.agents"].reason
    assert sizes["8x8"].agents == 2 and changes["sizes.8x8.agents"].reason.startswith("not a finite number")
    assert sizes["9x9"].agents == 4 and sizes["9x9"].hole_ratio == 0.5  # 81 - 41 = 40 free cells: room for 19
    for name, knobs in sizes.items():
        size = int(name.split("x")[0])
        assert size * size - hole_count(size, knobs.hole_ratio) >= fit_free_cells(knobs.agents), name
    # a hole ratio raised past what the size's agents fit is lowered, the count kept
    raised = generator.project({"sizes": {"4x4": {"agents": 5, "hole_ratio": 0.45}}}, current)
    assert raised.config.sizes["4x4"].agents == 5 and hole_count(4, raised.config.sizes["4x4"].hole_ratio) == 16 - 11
    assert "sizes.4x4.agents" in raised.accepted and any(c.field == "sizes.4x4.hole_ratio" for c in raised.changes)


def test_on_generation_uses_each_sizes_count_deterministically():
    generator = _task(ON)
    config = generator.project({"sizes": {"3x3": {"agents": 3}, "5x5": {"agents": 4}, "8x8": {"agents": 5}}}, generator.default_config()).config
    records = generator.generate(config, n=24, seed=7).records
    assert _counts(records) == Counter({(n, {3: 3, 5: 4, 8: 5}.get(n, 2)): 3 for n in range(3, 11)})
    assert all(r["id"].startswith(f"mfl-{r['size']}x{r['size']}-{len(r['agents'])}a-") for r in records)
    assert records_digest(generator.generate(config, n=24, seed=7).records) == records_digest(records)
    assert records_digest(generator.generate(config, n=24, seed=8).records) != records_digest(records)


def test_on_at_the_default_counts_draws_the_instances_of_the_knob_off():
    """The agent count enters the instance seed where the run's count did: a size left at ``agents``
    draws what it draws without the knob (paired arms), and another count draws other instances."""
    on, off = _task(ON), _task({})
    same = records_digest(on.generate(on.default_config(), n=16, seed=0).records)
    assert same == records_digest(off.generate(off.default_config(), n=16, seed=0).records) == PINS["records_n16_seed0"]
    moved = on.project({"sizes": {"6x6": {"agents": 3}}}, on.default_config()).config
    before = {r["id"] for r in on.generate(on.default_config(), n=16, seed=0).records}
    after = on.generate(moved, n=16, seed=0).records
    assert {r["id"] for r in after if r["size"] != 6} <= before
    assert all(r["id"] not in before and len(r["agents"]) == 3 for r in after if r["size"] == 6)


def test_on_config_files_are_strict_and_name_the_field(tmp_path):
    generator = _task(ON)
    sizes = _task({}).default_config().to_yaml_dict()["sizes"]
    path = tmp_path / "start.yaml"
    path.write_text(yaml.safe_dump({"sizes": sizes}))  # agents left out: every size at task.agents
    assert all(k.agents == 2 for k in load_generator_config(generator, path).sizes.values())
    sizes["3x3"]["agents"] = 4  # 3x3 at hole_ratio 0.1 keeps 8 free cells: room for 3
    path.write_text(yaml.safe_dump({"sizes": sizes}))
    with pytest.raises(ConfigError, match=r"sizes\.3x3\.agents: 4 agents need 9 free cells"):
        load_generator_config(generator, path)
    sizes["3x3"]["agents"], sizes["6x6"]["agents"] = 3, 7  # within the model's 2-8, above the run's range
    path.write_text(yaml.safe_dump({"sizes": sizes}))
    with pytest.raises(ConfigError, match=r"sizes\.6x6\.agents: 7 is above the projection's ceiling 5"):
        load_generator_config(generator, path)


@pytest.mark.parametrize("options, match", [
    ({"agents": 2, "agents_range": [1, 5]}, "agents_range"),
    ({"agents": 2, "agents_range": [2, 9]}, "agents_range"),
    ({"agents": 2, "agents_range": [5, 3]}, "agents_range"),
    ({"agents": 5, "agents_range": [5, 6]}, r"agents_range.*3x3 map fits at most 4"),
    ({"agents": 2, "agents_range": [3, 5]}, r"agents_range: \[3, 5\] must contain agents \(2\)"),
    ({"agents": 2, "agents_range": [2, 3, 4]}, "agents_range"),
])
def test_bad_ranges_name_the_field(options, match):
    with pytest.raises(ConfigError, match=match):
        _task(options)


def test_random_config_draws_the_counts_and_keeps_the_other_draws():
    on, off = _task(ON), _task({})
    for seed in range(4):
        drawn, plain = on.random_config(seed), off.random_config(seed)
        assert drawn.model_dump() == on.random_config(seed).model_dump()
        for name, knobs in drawn.sizes.items():
            size = int(name.split("x")[0])
            assert 2 <= knobs.agents <= min(5, agents_fitting(size, 0.0))
            assert (knobs.ratio, knobs.wait_ratio) == (plain.sizes[name].ratio, plain.sizes[name].wait_ratio)
            if knobs.agents <= agents_fitting(size, plain.sizes[name].hole_ratio):  # the same holes (the ratio may sit on the ceiling)
                assert hole_count(size, knobs.hole_ratio) == hole_count(size, plain.sizes[name].hole_ratio)
    assert len({k.agents for seed in range(4) for k in on.random_config(seed).sizes.values()}) > 1


def test_on_guidelines_and_brief_name_the_knob():
    generator = _task(ON)
    assert "- agents: the number of agents in each of that size's instances, a whole number from 2 to 5" in generator.guidelines()
    brief = generator.design_brief(100)
    assert "Change only ratio, hole_ratio, wait_ratio and agents" in brief and "from 2 to 5" in brief


def test_on_the_curriculum_engineer_moves_the_knob(registry):
    from envengineer.design.step import design
    from envengineer.design.evidence import Evidence
    from envengineer.design.prompts import build_request

    generator = registry.create("generator", "mapf-frozenlake", dict(ON), where="task")
    report = {"overall": {"n": 8, "valid": 4, "optimal": 2, "valid_rate": 0.5, "optimal_rate": 0.25, "failures": {"goal": 4}},
              "by": {"size": {g: {"n": 1, "valid": 1, "optimal": 0, "valid_rate": 1.0, "optimal_rate": 0.0, "failures": {}} for g in SIZE_NAMES}}}
    evidence = Evidence(task=generator, round=1, rounds_total=3, config=generator.default_config().model_dump(),
                        report=report, failure_types=("conflict", "goal"), history=[], signal={})
    outcome = design(registry.create("engineer", "curriculum"), build_request(evidence, registry, {"modules": ["G"]}))
    assert not outcome.fallback, outcome.reason
    counts = [k.agents for k in outcome.config.sizes.values()]
    assert max(counts) > 2 and counts == sorted(counts)  # ramped toward the hard end, easy to hard across sizes


def test_on_conforms():
    assert_task_conforms("mapf-frozenlake", ON, n=12, fuzz=100)


def test_a_run_config_with_the_knob_on_validates(registry, tmp_path):
    from envengineer.loop.runconfig import parse_run_config, resolve

    data = {"name": "agents-knob", "task": {"name": "mapf-frozenlake", **ON}, "engineer": "heuristic",
            "initial_config": "random", "eval": {"benchmarks": ["mapf-3agents", "mapf-4agents", "mapf-5agents"]}}
    run = resolve(parse_run_config(data), registry, base_dir=tmp_path)
    assert run.generator.options.agents_range == (2, 5) and run.generator.knob("agents").high == 5
    with pytest.raises(ConfigError, match=r"task.*agents_range"):
        resolve(parse_run_config({**data, "task": {"name": "mapf-frozenlake", "agents_range": [3, 5]}}), registry, base_dir=tmp_path)
