"""The simulated student: its stated dynamics, its answers through the task's validator, and a run."""

import json
from pathlib import Path

import pytest

from envengineer.errors import ConfigError, InputError
from envengineer.plugins.simulated import SimulatedPolicy, SimulatedPolicyOptions, SimulatedTrainer, SimulatedTrainerOptions, Student
from envengineer.components.training import TrainRequest


@pytest.fixture
def mapf(registry):
    return registry.create("generator", "mapf-frozenlake", {}, where="task")


@pytest.fixture
def validator(registry):
    return registry.get("validator", "mapf-frozenlake")()


def _student(tmp_path, mapf, **options):
    policy = SimulatedPolicy(SimulatedPolicyOptions(path=str(tmp_path / "base"), **options))
    (tmp_path / "base").mkdir(exist_ok=True)
    (tmp_path / "base" / "student.json").write_text(json.dumps({"params": policy.params(), "skills": {}}))
    return policy, Student.load(tmp_path / "base", mapf)


def test_success_falls_with_the_group_and_the_difficulty_knobs(tmp_path, mapf):
    _, student = _student(tmp_path, mapf)
    records = mapf.generate(mapf.default_config(), n=80, seed=0).records
    by_size = {}
    for r in records:
        by_size.setdefault(r["size"], []).append(student.p(r))
    means = [sum(v) / len(v) for _, v in sorted(by_size.items())]
    assert means == sorted(means, reverse=True) and means[0] > 0.9 and means[-1] < 0.01
    easy = {"size": 4, "hole_ratio": 0.0, "requires_wait": False}
    assert student.difficulty({**easy, "hole_ratio": 0.25}) == pytest.approx(student.difficulty(easy) + 0.5)


def test_greedy_answers_are_the_tasks_reference_or_empty_and_paired_by_instance(tmp_path, mapf, validator):
    policy, student = _student(tmp_path, mapf)
    records = mapf.generate(mapf.default_config(), n=40, seed=1).records
    first = policy.sample_records(mapf, records, style="full")
    assert first == policy.sample_records(mapf, records, style="full")  # greedy: a pure function of skill and instance
    verdicts = [validator.score(r, mapf.decode_response(r, a[0], "full")) for r, a in zip(records, first)]
    assert all(v.valid == bool(a[0]) for v, a in zip(verdicts, first)) and any(v.valid for v in verdicts)
    # a stronger student solves every instance the weaker one solves (one uniform number per instance)
    stronger = json.loads((tmp_path / "base" / "student.json").read_text())
    stronger["skills"] = {g: 3.0 for g in mapf.groups()}
    (tmp_path / "strong").mkdir()
    (tmp_path / "strong" / "student.json").write_text(json.dumps(stronger))
    second = policy.with_path(tmp_path / "strong").sample_records(mapf, records, style="full")
    assert all(b[0] for a, b in zip(first, second) if a[0]) and sum(bool(b[0]) for b in second) > sum(bool(a[0]) for a in first)
    sampled = policy.sampling(temperature=1.0, seed=0).sample_records(mapf, records, style="full", n=4)
    assert all(len(a) == 4 for a in sampled)


def test_it_answers_instances_not_prompts(tmp_path, mapf):
    policy, _ = _student(tmp_path, mapf)
    with pytest.raises(ConfigError, match="answers instances, not prompts"):
        policy.sample(["hi"])
    with pytest.raises(InputError, match="student.json"):
        Student.load(tmp_path / "nowhere", mapf)


def _round(tmp_path, mapf, validator, records, name, **options):
    trainer = SimulatedTrainer(SimulatedTrainerOptions(**options))
    request = TrainRequest(policy_path=tmp_path / "base", records=records, generator=mapf, validator=validator,
                           out_dir=tmp_path / name, seed=5)
    result = trainer.train(request)
    return Student.load(result.checkpoint, mapf), [json.loads(x) for x in (tmp_path / name / "rollouts.jsonl").read_text().splitlines()]


def test_a_round_gains_where_sampled_success_is_mixed_and_nothing_from_the_solved_or_unreachable(tmp_path, mapf, validator):
    _, before = _student(tmp_path, mapf)
    config = mapf.default_config().model_dump()
    sizes = list(config["sizes"])
    one = lambda size: mapf.config_model.model_validate({"sizes": {s: {**k, "ratio": 0.86 if s == size else 0.02} for s, k in config["sizes"].items()}})  # noqa: E731
    gains = {}
    for size in ("3x3", "4x4", "10x10"):
        records = [r for r in mapf.generate(one(size), n=140, seed=2).records if f"{r['size']}x{r['size']}" == size and not r["requires_wait"]]
        after, lines = _round(tmp_path, mapf, validator, records, f"on-{size}", transfer=0.0, forget=0.0)
        gains[size] = after.skill(size) - before.skill(size)
        assert len(lines) == len(records) and all(line["samples"] == 8 and line["kept"] for line in lines)
    assert gains["4x4"] > 5 * gains["3x3"] and gains["4x4"] > 0.2 and gains["10x10"] == 0.0
    # transfer: the neighbours of the trained group gain a share; forgetting: others lose a little
    records = [r for r in mapf.generate(one("4x4"), n=100, seed=2).records if r["size"] == 4]
    after, _ = _round(tmp_path, mapf, validator, records, "transfer", transfer=0.5, forget=0.1)
    gain = after.skill("4x4") - before.skill("4x4")
    assert after.skill("5x5") - before.skill("5x5") == pytest.approx(0.5 * gain) and after.skill("3x3") > before.skill("3x3")
    assert after.skill("10x10") == before.skill("10x10")  # never below the start
    assert sizes[0] == "3x3"


def test_kept_prompts_mode_screens_and_draws(tmp_path, mapf, validator):
    _student(tmp_path, mapf)
    drawn = []

    def draw(n, part):
        records = mapf.generate(mapf.default_config(), n=n, seed=100 + part).records
        drawn.append(part)
        return records

    trainer = SimulatedTrainer(SimulatedTrainerOptions())
    records = mapf.generate(mapf.default_config(), n=40, seed=7).records
    request = TrainRequest(policy_path=tmp_path / "base", records=records, generator=mapf, validator=validator, out_dir=tmp_path / "kept",
                           seed=1, budget_mode="kept_prompts", kept_target=20, max_draws=400, draw=draw)
    result = trainer.train(request)
    lines = [json.loads(x) for x in (tmp_path / "kept" / "rollouts.jsonl").read_text().splitlines()]
    assert result.metrics["prompts_used"] == 20 and sum(line["kept"] for line in lines) == 20 and drawn
    assert all(line["samples"] == (16 if line["kept"] else 8) for line in lines)
    assert result.metrics["judged"] == len(lines) and result.metrics["capped"] is False


def test_a_run_is_the_same_twice_and_reports_sampled_pass1(tmp_path, registry):
    from envengineer.loop.steps import run

    config = tmp_path / "sim.yaml"
    config.write_text("name: sim\nrounds: 3\nbudget: 60\ntask: {name: mapf-frozenlake}\nengineer: heuristic\n"
                      "policy: simulated\ntrainer: simulated\neval: {limit: 96, sampled: 2}\n")
    first = run(config, registry=registry, output=str(tmp_path / "a"))
    second = run(config, registry=registry, output=str(tmp_path / "b"))
    assert [(r["valid_rate"], r["sampled_pass1"]) for r in first] == [(r["valid_rate"], r["sampled_pass1"]) for r in second]
    for rel in ("round-02/train/checkpoint/student.json", "round-01/config.yaml", "round-01/train/rollouts.jsonl", "round-02/eval/verdicts.jsonl"):
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel
    summary = json.loads(Path(tmp_path / "a" / "round-02/eval/summary.json").read_text())
    assert {k: v for k, v in summary.items() if k != "settings"} == {
        k: v for k, v in json.loads(Path(tmp_path / "b" / "round-02/eval/summary.json").read_text()).items() if k != "settings"}
    assert summary["sampled"]["n"] == 2 and summary["sampled"]["temperature"] == 1.0 and set(summary["sampled"]["by"]["size"]) <= set(registry.create("generator", "mapf-frozenlake", {}, where="task").groups())


def test_the_report_shows_the_training_signal(tmp_path, registry):
    pytest.importorskip("matplotlib")
    from envengineer.loop.steps import run
    from envengineer.plugins.report.page import write_report

    config = tmp_path / "sim.yaml"
    config.write_text("name: sim\nrounds: 2\nbudget: 40\ntask: {name: mapf-frozenlake}\nengineer: learnability\n"
                      "policy: simulated\ntrainer: simulated\neval: {limit: 48}\n")
    run(config, registry=registry, output=str(tmp_path / "run"))
    write_report(tmp_path / "run", registry=registry)
    html = (tmp_path / "run" / "report.html").read_text()
    assert '<section id="signal"><h2>Training signal</h2>' in html and "sampled success by size" in html
    assert (tmp_path / "run" / "report" / "signal.png").stat().st_size > 1000
