"""Training instances are seeded on the hole count: a hole_ratio move smaller than one cell
leaves a size's instances as they were, so an engineer arm's data stays paired with the
fixed arm's. The legacy derivation on the float (``seed_scheme="ratio"``) still reproduces
the data drawn before the change, byte for byte."""

import hashlib
import json
from collections import defaultdict

import pytest

from envengineer.errors import ConfigError
from envengineer.registry import load_registry
from envengineer.tasks.mapf_frozenlake.knobs import hole_count, random_config, uniform_config
from envengineer.tasks.mapf_frozenlake.draw import generate, plan_jobs


def _moved(config, size, hole_ratio):
    sizes = dict(config.sizes)
    name = f"{size}x{size}"
    sizes[name] = sizes[name].model_copy(update={"hole_ratio": hole_ratio})
    return config.model_copy(update={"sizes": sizes})


def _ids_by_size(instances):
    out = defaultdict(set)
    for instance in instances:
        out[instance.size].add(instance.id)
    return dict(out)


def _records_digest(instances):
    return hashlib.sha256("\n".join(json.dumps(i.to_record(), sort_keys=True) for i in instances).encode()).hexdigest()


def _jobs_digest(jobs):
    return hashlib.sha256(json.dumps([[j.size, j.hole_ratio, j.agents, j.wants_wait, j.seed] for j in jobs]).encode()).hexdigest()


def test_a_move_smaller_than_one_cell_draws_the_same_instances():
    base = uniform_config()
    assert base.knobs(6).hole_ratio == 0.14
    moved = _moved(base, 6, 0.15)
    assert hole_count(6, 0.14) == hole_count(6, 0.15) == 5
    a, _ = generate(base, n=160, seed=3)
    b, _ = generate(moved, n=160, seed=3)
    assert [i.id for i in a] == [i.id for i in b]  # every size, in the same order
    # the records keep the configured hole_ratio: only 6x6's field differs
    assert {i.hole_ratio for i in b if i.size == 6} == {0.15}
    assert [i.to_record() for i in a if i.size != 6] == [i.to_record() for i in b if i.size != 6]


def test_a_move_that_changes_the_hole_count_redraws_that_size_only():
    base = uniform_config()
    moved = _moved(base, 6, 0.2)
    assert hole_count(6, 0.2) == 7
    a, b = _ids_by_size(generate(base, n=160, seed=3)[0]), _ids_by_size(generate(moved, n=160, seed=3)[0])
    assert a.keys() == b.keys()
    assert not a[6] & b[6]
    assert all(a[size] == b[size] for size in a if size != 6)


def test_the_legacy_derivation_redraws_on_any_float_move():
    base = uniform_config()
    a, _ = generate(base, n=160, seed=3, seed_scheme="ratio")
    b, _ = generate(_moved(base, 6, 0.15), n=160, seed=3, seed_scheme="ratio")
    assert _ids_by_size(a)[6] != _ids_by_size(b)[6]


def test_the_legacy_derivation_reproduces_the_data_drawn_before_the_change():
    # sha256 values computed with the generator as it was before hole-count seeding
    jobs = plan_jobs(uniform_config(), n=500, seed=3, agents=2, seed_scheme="ratio")
    assert _jobs_digest(jobs) == "45081d5c47efa8eb4e1093d9b9024798020aaa08dc578309c09e79d13a176107"
    jobs = plan_jobs(random_config(1, agents=3), n=300, seed=11, agents=3, seed_scheme="ratio")
    assert _jobs_digest(jobs) == "7e2e7d326ca62513bcfc961bd0f05a1bde6a48c73d100e418f1569c9d4d8bc67"
    instances, discarded = generate(uniform_config(), n=800, seed=7, seed_scheme="ratio")
    assert discarded == {"duplicate": 1}  # the redraw of a duplicate takes the same path as before
    assert _records_digest(instances) == "8c6c869fc8746090d063399ee45ac880c431e736bfb04beff54817911de3ecd0"
    # the default scheme draws other instances, as intended
    assert _records_digest(generate(uniform_config(), n=800, seed=7)[0]) != _records_digest(instances)


def test_the_task_generates_with_hole_count_seeding():
    generator, _ = load_registry(entry_points=False).task("mapf-frozenlake", {"agents": 2})
    records = generator.generate(uniform_config(), n=24, seed=4).records
    assert records == [i.to_record() for i in generate(uniform_config(), n=24, seed=4, seed_scheme="holes")[0]]


def test_an_unknown_seed_scheme_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="seed_scheme"):
        generate(uniform_config(), n=8, seed=0, seed_scheme="float")


def test_the_task_option_selects_the_legacy_derivation():
    generator, _ = load_registry(entry_points=False).task("mapf-frozenlake", {"agents": 2, "seed_scheme": "ratio"})
    records = generator.generate(uniform_config(), n=24, seed=4).records
    assert records == [i.to_record() for i in generate(uniform_config(), n=24, seed=4, seed_scheme="ratio")[0]]


def test_a_recorded_round_config_below_the_floor_still_resumes(tmp_path):
    """The loop reads back what it wrote as written: a run recorded before the bounds check resumes."""
    from envengineer.store.configs import load_generator_config

    generator, _ = load_registry(entry_points=False).task("mapf-frozenlake", {"agents": 2})
    data = uniform_config().model_dump()
    data["sizes"]["3x3"]["ratio"], data["sizes"]["10x10"]["ratio"] = 0.0, data["sizes"]["10x10"]["ratio"] + data["sizes"]["3x3"]["ratio"]
    path = tmp_path / "config.yaml"
    import yaml

    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="sizes.3x3.ratio"):
        load_generator_config(generator, path)
    assert load_generator_config(generator, path, check_bounds=False).sizes["3x3"].ratio == 0.0
