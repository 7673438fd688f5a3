"""mapf-frozenlake generator: determinism, stratification, certification, config errors."""

import json

import pytest
from hypothesis import given, settings, strategies as st
from typer.testing import CliRunner

from envengineer.cli.commands import app
from envengineer.errors import ConfigError
from envengineer.tasks.mapf_frozenlake import SIZE_NAMES
from envengineer.tasks.mapf_frozenlake.knobs import MapfConfig, SizeKnobs, allocate, hole_count, uniform_config
from envengineer.tasks.mapf_frozenlake.draw import generate
from envengineer.tasks.mapf_frozenlake.instance import from_record, instance_id
from envengineer.tasks.mapf_frozenlake.solver import solve
from envengineer.tasks.mapf_frozenlake.validator import MapfValidator
from envengineer.tasks.mapf_frozenlake.answer import format_answer


def test_same_config_and_seed_give_identical_records():
    a, _ = generate(uniform_config(), n=120, seed=5)
    b, _ = generate(uniform_config(), n=120, seed=5)
    assert [i.to_record() for i in a] == [i.to_record() for i in b]
    c, _ = generate(uniform_config(), n=120, seed=6)
    assert [i.id for i in a] != [i.id for i in c]


def test_parallel_generation_is_identical():
    a, _ = generate(uniform_config(), n=80, seed=2)
    b, _ = generate(uniform_config(), n=80, seed=2, workers=2)
    assert [i.to_record() for i in a] == [i.to_record() for i in b]


def test_ratios_holes_and_wait_ratio_are_exact():
    config = uniform_config(wait_ratio=0.5)
    instances, discarded = generate(config, n=400, seed=1)
    assert discarded.get("solver_gave_up", 0) == 0
    counts = allocate(config, 400)
    for size, expected in counts.items():
        of_size = [i for i in instances if i.size == size]
        assert len(of_size) == expected
        assert sum(i.requires_wait for i in of_size) == int(0.5 * expected + 0.5)
        knobs = config.knobs(size)
        assert all(sum(row.count("H") for row in i.grid) == hole_count(size, knobs.hole_ratio) for i in of_size)


def test_every_instance_is_certified_and_ids_are_unique_and_stable():
    instances, _ = generate(uniform_config(), n=200, seed=3, agents=3)
    ids = [i.id for i in instances]
    assert len(set(ids)) == len(ids)
    validator = MapfValidator()
    for inst in instances[:60]:
        record = inst.to_record()
        assert record["id"] == instance_id(inst.size, inst.grid, inst.agents)
        assert from_record(json.loads(json.dumps(record))) == inst
        solution = solve(inst.grid, [(a.start, a.goal) for a in inst.agents])
        assert solution.status == "optimal" and solution.cost == inst.optimal_cost
        assert solution.requires_wait == inst.requires_wait
        starts = [a.start for a in inst.agents]
        goals = [a.goal for a in inst.agents]
        assert len(set(starts)) == len(starts) and len(set(goals)) == len(goals)
        assert all(a.start != a.goal for a in inst.agents)
        verdict = validator.score(record, format_answer(solution.paths))
        assert verdict.valid and verdict.optimal


@settings(max_examples=15, deadline=None)
@given(
    size=st.sampled_from(SIZE_NAMES),
    hole=st.floats(0.0, 0.4),
    wait=st.floats(0.0, 1.0),
    agents=st.integers(2, 3),
    seed=st.integers(0, 10**6),
)
def test_any_feasible_knobs_generate(size, hole, wait, agents, seed):
    sizes = {name: SizeKnobs(ratio=0.0, hole_ratio=0.1, wait_ratio=0.0) for name in SIZE_NAMES}
    sizes[size] = SizeKnobs(ratio=1.0, hole_ratio=hole, wait_ratio=wait)
    n = int(size.split("x")[0])
    if n * n - hole_count(n, hole) < 2 * agents + 1:
        return
    instances, discarded = generate(MapfConfig(sizes=sizes), n=6, seed=seed, agents=agents)
    assert len(instances) == 6 and discarded.get("solver_gave_up", 0) == 0
    assert sum(i.requires_wait for i in instances) == int(wait * 6 + 0.5)


def test_impossible_knobs_name_the_field():
    with pytest.raises(ConfigError, match=r"sizes\.3x3\.hole_ratio"):
        generate(uniform_config(), n=50, seed=0, agents=9)


def test_user_config_errors_name_the_field():
    data = uniform_config().to_yaml_dict()
    data["sizes"]["6x6"]["ratoi"] = 0.1
    with pytest.raises(ValueError, match="ratoi"):
        MapfConfig.model_validate(data)
    data = uniform_config().to_yaml_dict()
    del data["sizes"]["4x4"]
    with pytest.raises(ValueError, match="4x4"):
        MapfConfig.model_validate(data)
    data = uniform_config().to_yaml_dict()
    data["sizes"]["4x4"]["ratio"] = 0.5
    with pytest.raises(ValueError, match="sum to 1"):
        MapfConfig.model_validate(data)


def test_cli_generate_solve_score(tmp_path):
    runner = CliRunner()
    inst, resp, verd = tmp_path / "i.jsonl", tmp_path / "r.jsonl", tmp_path / "v.jsonl"
    result = runner.invoke(app, ["generate", "mapf-frozenlake", "--n", "60", "--agents", "2", "--seed", "4", "--output", str(inst)])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in inst.read_text().splitlines()]
    assert len(records) == 60
    assert list(records[0]) == ["id", "size", "grid", "agents", "hole_ratio", "optimal_cost", "requires_wait", "seed"]
    result = runner.invoke(app, ["solve", "mapf-frozenlake", "--instances", str(inst), "--output", str(resp)])
    assert result.exit_code == 0, result.output
    # several samples per instance: duplicate every response line, and break one
    lines = [json.loads(line) for line in resp.read_text().splitlines()]
    lines = lines + [dict(lines[0], response="no answer here")]
    resp.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = runner.invoke(app, ["score", "mapf-frozenlake", "--instances", str(inst), "--responses", str(resp), "--output", str(verd)])
    assert result.exit_code == 0, result.output
    verdicts = [json.loads(line) for line in verd.read_text().splitlines()]
    assert len(verdicts) == 61
    assert all(v["valid"] and v["optimal"] and v["failure"] is None for v in verdicts[:60])
    assert verdicts[60]["failure"] == "parse" and verdicts[60]["id"] == lines[0]["id"]
    assert set(verdicts[0]) == {"id", "valid", "optimal", "failure", "failed_checks", "cost"}
    assert "parse" in result.output and "10x10" in result.output


def test_cli_bad_input_names_file_and_line(tmp_path):
    from envengineer.cli.commands import main

    inst = tmp_path / "i.jsonl"
    inst.write_text('{"id": "a", "size": 3, "grid": ["FFF","FFF","FFF"], "agents": [{"start": [0,0], "goal": [2,2]}]}\n{broken\n')
    out = tmp_path / "out.jsonl"
    with pytest.raises(SystemExit) as info:
        main(["solve", "mapf-frozenlake", "--instances", str(inst), "--output", str(out)])
    assert info.value.code == 2
    assert not out.exists()  # no partial output left looking complete
    cfg = tmp_path / "c.yaml"
    cfg.write_text("sizes: {3x3: {ratio: 1.0, hole_ratio: 0.1, wait_ratio: 0.3, bogus: 1}}\n")
    with pytest.raises(SystemExit) as info:
        main(["generate", "mapf-frozenlake", "--config", str(cfg), "--n", "5", "--output", str(out)])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["score", "mapf-frozenlake", "--instances", str(tmp_path / "missing.jsonl"), "--responses", str(inst), "--output", str(out)])
    assert info.value.code == 2


def test_one_agent_needs_wait_ratio_zero():
    with pytest.raises(ConfigError, match=r"wait_ratio"):
        generate(uniform_config(wait_ratio=0.3), n=100, seed=0, agents=1)
    instances, _ = generate(uniform_config(wait_ratio=0.0), n=40, seed=0, agents=1)
    assert {i.k for i in instances} == {1} and not any(i.requires_wait for i in instances)


def test_shortest_paths_check_agrees_with_the_solver():
    import random

    from envengineer.tasks.mapf_frozenlake.solver import shortest_paths_suffice, solve

    rng = random.Random(11)
    decided = 0
    for _ in range(300):
        size, k = rng.randint(3, 6), rng.randint(2, 5)
        cells = [(r, c) for r in range(size) for c in range(size)]
        holes = set(rng.sample(cells, int(rng.choice([0.0, 0.2, 0.3]) * size * size)))
        free = [c for c in cells if c not in holes]
        if len(free) < 2 * k:
            continue
        agents = list(zip(rng.sample(free, k), rng.sample(free, k)))
        grid = ["".join("H" if (r, c) in holes else "F" for c in range(size)) for r in range(size)]
        verdict, total = shortest_paths_suffice(grid, agents)
        truth = solve(grid, agents, time_limit=30)
        assert truth.status != "gave_up"
        assert verdict is not None
        assert verdict == (truth.status == "optimal" and not truth.requires_wait), (grid, agents)
        if verdict:
            assert truth.cost == total
        decided += 1
    assert decided > 200


def test_the_shortest_paths_shortcut_changes_no_instance(monkeypatch):
    """Crowded 5-agent maps: the same records with the shortcut and with every draw fully solved."""
    import envengineer.tasks.mapf_frozenlake.draw as draw_module
    from envengineer.registry import load_registry
    from envengineer.tasks.mapf_frozenlake.knobs import uniform_config

    generator, _ = load_registry(entry_points=False).task("mapf-frozenlake", {"agents": 5})
    config = uniform_config(hole_ratio=0.3, wait_ratio=0.5)
    fast = generator.generate(config, n=24, seed=4).records
    monkeypatch.setattr(draw_module, "shortest_paths_suffice", lambda *args, **kwargs: (None, None))
    assert generator.generate(config, n=24, seed=4).records == fast


def test_a_time_limit_never_changes_the_data_it_stops_generation():
    """No wall-clock budget decides the data: by default there is none (the work limit bounds every
    solve), and a time limit that a config sets and that fires stops generation with an error naming
    the option instead of discarding the draw (which would make the data depend on the machine)."""
    import inspect

    from envengineer.tasks.mapf_frozenlake import draw
    from envengineer.tasks.mapf_frozenlake.draw import GenerationError
    from envengineer.tasks.mapf_frozenlake.generator import MapfOptions

    assert draw.TIME_LIMIT is None and MapfOptions().solver_time_limit is None
    assert inspect.signature(generate).parameters["time_limit"].default is None
    config = uniform_config(wait_ratio=1.0)
    with pytest.raises(GenerationError, match=r"task\.solver_time_limit: 0 s.*depend on this machine's speed"):
        generate(config, n=8, seed=0, agents=4, time_limit=0.0)
    unlimited, discarded = generate(config, n=8, seed=0, agents=4)
    generous, again = generate(config, n=8, seed=0, agents=4, time_limit=3600.0)
    assert [i.to_record() for i in unlimited] == [i.to_record() for i in generous] and discarded == again
    assert "solver_timed_out" not in discarded


def test_reference_answers_are_budgeted_by_work(monkeypatch):
    """The reference solver's answer (`envengineer solve`, warm starts) is solved within REFERENCE_WORK units,
    never seconds: a record past it is an error naming the give-up, the same on every machine."""
    from envengineer.registry import load_registry
    from envengineer.tasks.mapf_frozenlake import generator as generator_module

    generator, validator = load_registry(entry_points=False).task("mapf-frozenlake", {"agents": 5})
    grid = ["FFFFFFFFFF", "FHFHFHHFFH", "FFFFHFFFFF", "HFFHFFFHHF", "FFFFHFFFFF",
            "FFFFHFHFFF", "FFFFHFFFFF", "FFFHFFFFFF", "HFFHFFFHFH", "FFFHFFFFFF"]
    agents = [((4, 9), (9, 0)), ((3, 6), (4, 9)), ((7, 9), (9, 4)), ((8, 8), (4, 0)), ((8, 1), (5, 5))]
    record = {"id": "foreign", "size": 10, "grid": grid, "hole_ratio": 0.2, "optimal_cost": 82,
              "agents": [{"start": list(s), "goal": list(g)} for s, g in agents]}
    assert validator.score(record, generator.reference_answer(record)).optimal  # 47 units
    monkeypatch.setattr(generator_module, "REFERENCE_WORK", 16)
    with pytest.raises(ValueError, match=r"instance foreign: gave_up \(work limit of 16 units reached\)"):
        generator.reference_answer(record)
