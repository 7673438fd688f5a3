"""The core files, prints, scores and checks whatever a task declares (issue 10), shown on the
arith example package (examples/envengineer-arith, registered at runtime) beside MAPF-FrozenLake."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from envengineer.components import Aggregate, Benchmark, Grouping, Policy, Verdict
from envengineer.errors import ConfigError
from envengineer.registry import Registry

ARITH = Path(__file__).resolve().parents[1] / "examples" / "envengineer-arith"


@pytest.fixture
def arith_registry(pm):
    """The built-ins plus the arith example's plugin module."""
    sys.path.insert(0, str(ARITH))
    try:
        import envengineer_arith.plugin
    finally:
        sys.path.remove(str(ARITH))
    pm.register(envengineer_arith.plugin, name="arith")
    return Registry(pm)


def arith_records(generator, n=30, seed=1):
    return generator.generate(generator.default_config(), n=n, seed=seed).records


class Echo(Policy):
    """A policy answering from a list (an API-less stand-in)."""

    name = "echo"

    def __init__(self, answers):
        super().__init__()
        self.answers = list(answers)

    def failed_calls(self):
        return []

    def sample(self, prompts, n=1):
        return [[self.answers.pop(0)] for _ in prompts]


# ------------------------------------------------------------------ 1. declared groupings


def test_grouping_defaults_and_values():
    g = Grouping("size", label=lambda v: f"{v}x{v}", order=(3, 4))
    assert (g.title, g.field, g.order) == ("size", "size", ("3", "4"))
    assert g.value({"size": 6}) == "6x6" and g.value({}) is None
    assert Grouping("digits", title="digits per term", field="group").value({"group": "2d"}) == "2d"


def test_mapf_declares_size_then_hole_ratio_and_keeps_its_groups(registry):
    from envengineer.tasks.mapf_frozenlake import SIZE_NAMES

    generator, _ = registry.task("mapf-frozenlake")
    assert [g.name for g in generator.groupings] == ["size", "hole_ratio"]
    record = {"id": "x", "size": 6, "hole_ratio": 0.10}
    assert generator.group(record) == "6x6" and generator.groups() == SIZE_NAMES
    assert generator.groupings[1].value(record) == "0.1" and generator.record_id(record) == "x"
    bench = registry.benchmark("mapf-3agents")
    assert bench.subsets.name == "subset" and bench.subset_field == "subset"
    assert bench.aggregate.key == "sum_over_subsets" and bench.aggregate.how == "sum"


def test_arith_declares_its_own_groupings(arith_registry):
    generator, _ = arith_registry.task("arith")
    assert [(g.name, g.title) for g in generator.groupings] == [("digits", "digits per term"), ("addends", "addends")]
    record = {"id": "a", "group": "2d", "terms": [10, 20, 30]}
    assert generator.group(record) == "2d" and generator.groups() == ("1d", "2d", "3d")
    assert generator.groupings[1].value(record) == "3"


def test_a_benchmark_without_subsets_has_no_aggregate_and_subset_field_is_shorthand(tmp_path):
    plain = Benchmark("b", "arith", "", tmp_path / "b.jsonl", "")
    assert plain.subsets is None and plain.aggregate is None
    short = Benchmark("b", "arith", "", tmp_path / "b.jsonl", "", subset_field="part")
    assert short.subsets == Grouping("part")
    with pytest.raises(ValueError, match="how"):
        Aggregate("k", "K", how="median")
    with pytest.raises(ValueError, match="metric"):
        Aggregate("k", "K", metrics=("speed",))


# -------------------------------------------------- 2. generic evaluation, taskops, commands


def test_score_file_files_arith_under_its_groupings_with_a_graded_score(arith_registry, tmp_path):
    from envengineer.loop.taskops import generate_file, score_file

    generator, validator = arith_registry.task("arith")
    inst = tmp_path / "i.jsonl"
    generate_file(generator, generator.default_config(), n=30, seed=2, output=inst)
    records = [json.loads(line) for line in inst.read_text().splitlines()]
    responses = tmp_path / "r.jsonl"
    answers = [f"<answer>{r['answer'] + (1 if i % 2 else 0)}</answer>" for i, r in enumerate(records)]
    responses.write_text("".join(json.dumps({"id": r["id"], "response": a}) + "\n" for r, a in zip(records, answers)))
    summary = score_file(generator, validator, instances=inst, responses=responses, output=tmp_path / "v.jsonl")
    assert list(summary.by) == ["digits", "addends"] and list(summary.by["digits"]) == ["1d", "2d", "3d"]
    assert "size" not in summary.by and "subset" not in summary.by
    assert summary.overall.valid_rate == 0.5 and 0.5 < summary.overall.mean_score < 1.0
    assert summary.overall.to_dict()["mean_score"] == round(summary.overall.mean_score, 6)
    verdicts = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert "score" not in verdicts[0] and 0 < verdicts[1]["score"] < 0.5  # only a graded verdict carries its score


def test_evaluate_files_under_the_benchmarks_subsets_and_its_aggregate(arith_registry, tmp_path):
    from envengineer.loop.evaluation import evaluate, failing_examples, write_eval

    generator, validator = arith_registry.task("arith")
    records = arith_records(generator)
    for i, record in enumerate(records):
        record["part"] = "even" if i % 2 == 0 else "odd"
    bench = Benchmark("arith-val", "arith", "", tmp_path / "v.jsonl", "", subsets=Grouping("part", title="part", order=("odd", "even")),
                      aggregate=Aggregate("mean_over_parts", "Mean over parts", how="mean", metrics=("valid", "score")))
    answers = [generator.reference_answer(r) if i % 3 else "no idea" for i, r in enumerate(records)]
    result = evaluate(Echo(answers), generator, validator, records, benchmark=bench)
    assert list(result.summary.by) == ["digits", "part", "addends"] and list(result.summary.by["part"]) == ["odd", "even"]
    data = result.to_summary_dict()
    parts = result.summary.by["part"]
    expected = round((parts["odd"].valid_rate + parts["even"].valid_rate) / 2, 6)
    assert data["mean_over_parts"]["valid"] == expected and set(data["mean_over_parts"]) == {"valid", "score"}
    assert "sum_over_subsets" not in data
    # no benchmark: no subsets, no aggregate
    plain = evaluate(Echo(answers), generator, validator, records).to_summary_dict()
    assert "part" not in plain["by"] and "mean_over_parts" not in plain
    # F's failing examples show the task's real prompt (arith declares only the full style)
    examples = failing_examples(result, generator, limit=4)
    assert examples and all(e["prompt"].startswith("Compute ") for e in examples)
    write_eval(tmp_path / "out", result, examples)
    assert (tmp_path / "out" / "rates.csv").read_text().splitlines()[0].endswith(",mean_score")


def test_mapf_failing_examples_still_show_the_compact_prompt(registry):
    from envengineer.loop.evaluation import evaluate, failing_examples
    from envengineer.fileio import read_jsonl

    bench = registry.benchmark("mapf-2agents-val")
    generator, validator = registry.task("mapf-frozenlake")
    records = read_jsonl(bench.path)[:6]
    result = evaluate(Echo(["nope"] * 6), generator, validator, records, benchmark=bench)
    examples = failing_examples(result, generator, limit=4)
    assert examples[0]["prompt"] == generator.render(records[0], "compact")
    data = result.to_summary_dict()
    assert list(data["by"]) == ["size", "subset", "hole_ratio"] and set(data["sum_over_subsets"]) == {"valid", "optimal"}


def test_cli_score_prints_the_declared_titles_and_a_score_column(arith_registry, tmp_path, monkeypatch):
    import envengineer.registry
    from envengineer.cli import commands as cli

    monkeypatch.setattr(envengineer.registry, "load_registry", lambda *a, **k: arith_registry)  # what the commands' state builds
    runner = CliRunner()
    inst, resp, verd = tmp_path / "i.jsonl", tmp_path / "r.jsonl", tmp_path / "v.jsonl"
    assert runner.invoke(cli.app, ["generate", "arith", "--n", "12", "--seed", "1", "--output", str(inst)]).exit_code == 0
    records = [json.loads(line) for line in inst.read_text().splitlines()]
    resp.write_text("".join(json.dumps({"id": r["id"], "response": f"<answer>{r['answer'] + i % 2}</answer>"}) + "\n" for i, r in enumerate(records)))
    result = runner.invoke(cli.app, ["score", "arith", "--instances", str(inst), "--responses", str(resp), "--output", str(verd)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "arith by digits per term" in result.output and "arith by addends" in result.output
    assert "score" in result.output and "size" not in result.output


def test_task_options_come_from_the_task_not_the_core(arith_registry, tmp_path, monkeypatch):
    import envengineer.registry
    from envengineer.cli import commands as cli

    monkeypatch.setattr(envengineer.registry, "load_registry", lambda *a, **k: arith_registry)  # what the commands' state builds
    runner = CliRunner()
    out = tmp_path / "m.jsonl"
    ok = runner.invoke(cli.app, ["generate", "mapf-frozenlake", "--n", "3", "--agents", "3", "--seed", "1", "--output", str(out)])
    assert ok.exit_code == 0, ok.output
    assert all(len(json.loads(line)["agents"]) == 3 for line in out.read_text().splitlines())
    same = tmp_path / "o.jsonl"
    ok = runner.invoke(cli.app, ["generate", "mapf-frozenlake", "--n", "3", "--option", "agents=3", "--seed", "1", "--output", str(same)])
    assert ok.exit_code == 0 and same.read_bytes() == out.read_bytes()
    typo = runner.invoke(cli.app, ["generate", "mapf-frozenlake", "--n", "3", "--agentz", "3", "--output", str(out)])
    assert typo.exit_code != 0 and "--agentz" in str(typo.exception) and "--agents" in str(typo.exception)
    foreign = runner.invoke(cli.app, ["generate", "arith", "--n", "3", "--agents", "2", "--output", str(out)])
    assert foreign.exit_code != 0 and "task arith" in str(foreign.exception)


# ----------------------------------------------------------------------- 3. a graded score


def test_verdict_score_defaults_to_valid_and_is_bounded():
    assert Verdict(True, True, None).score == 1.0 and Verdict(False, False, "x").score == 0.0
    assert not Verdict(True, True, None).graded and Verdict(False, False, "x", score=0.25).graded
    assert "score" not in Verdict(True, True, None).to_record("a")
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="score"):
            Verdict(False, False, "x", score=bad)


def test_trl_reward_valid_or_score(arith_registry):
    generator, validator = arith_registry.task("arith")
    records = [{"id": "a", "group": "1d", "terms": [4, 5], "answer": 9}]
    request = SimpleNamespace(generator=generator, validator=validator, prompt_style="full")
    completions = ["<answer>9</answer>", "<answer>8</answer>"]
    rewards = {}
    for reward in ("valid", "score"):
        trainer = arith_registry.create("trainer", "trl", {"reward": reward})
        rewards[reward] = trainer.reward_fn(request, records)(None, completions, [0, 0])
    assert rewards["valid"] == [1.0, 0.0]
    assert rewards["score"][0] == 1.0 and 0.0 < rewards["score"][1] < 0.5
    assert arith_registry.create("trainer", "trl", {}).options.reward == "valid"
    with pytest.raises(ConfigError, match="reward"):
        arith_registry.create("trainer", "trl", {"reward": "cost"})


def test_verl_compute_score_and_override(arith_registry, monkeypatch, tmp_path):
    from envengineer.plugins.trainers import verl_data

    pair = arith_registry.task("arith")
    monkeypatch.setattr(verl_data, "task_pair", lambda task_json: pair)
    record = json.dumps({"id": "a", "group": "1d", "terms": [4, 5], "answer": 9})
    info = {"task": json.dumps({"name": "arith"}), "prompt_style": "full"}
    valid = verl_data.compute_score("arith", "<answer>8</answer>", record, info)
    graded = verl_data.compute_score("arith", "<answer>8</answer>", record, info, reward="score")
    assert valid["score"] == 0.0 and 0.0 < graded["score"] < 0.5 and graded["acc"] == 0.0
    assert set(valid) == set(graded)
    with pytest.raises(ConfigError, match="reward"):
        verl_data.compute_score("arith", "x", record, info, reward="cost")
    trainer = arith_registry.create("trainer", "verl", {"reward": "score"})
    assert trainer.options.reward == "score"
    key = "+reward.custom_reward_function.reward_kwargs.reward"
    pytest.importorskip("hydra")
    from envengineer.components.training import TrainRequest

    request = TrainRequest(policy_path=tmp_path / "model", records=[], generator=None, validator=None, out_dir=tmp_path / "round", seed=3, round=1)
    assert f"{key}=score" in trainer.overrides(request, 4000)
    assert not any(item.startswith(key) for item in arith_registry.create("trainer", "verl", {}).overrides(request, 4000))


# ------------------------------------------------------------- 4. eval sets against the task


def test_resolve_refuses_another_tasks_benchmarks(arith_registry):
    from envengineer.loop.runconfig import parse_run_config, resolve

    base = {"name": "a", "task": {"name": "arith"}, "policy": {"name": "tiny", "prompt_style": "full"}}  # arith's one style
    with pytest.raises(ConfigError, match=r"eval.validation: mapf-2agents-val is a mapf-frozenlake benchmark; this run's task is arith \(its benchmarks: arith-val\)"):
        resolve(parse_run_config({**base, "eval": {"validation": "mapf-2agents-val"}}), arith_registry)
    cfg = parse_run_config({"name": "m", "task": "mapf-frozenlake", "eval": {"benchmarks": ["mapf-3agents"]}})
    assert resolve(cfg, arith_registry).config.eval.benchmarks == ["mapf-3agents"]  # MAPF's own sets pass
    with pytest.raises(ConfigError, match="eval.benchmarks: mapf-3agents is a mapf-frozenlake benchmark"):
        resolve(parse_run_config({**base, "eval": {"benchmarks": ["mapf-3agents"]}}), arith_registry)


def test_the_validation_set_defaults_to_the_tasks_declared_one(arith_registry, pm):
    """eval.validation: an explicit setting wins; unset, the task's Generator.validation_benchmark;
    neither: an error naming the field. No task name in the core's default."""
    from envengineer_arith.generator import ArithGenerator
    from envengineer_arith.validator import ArithValidator

    from envengineer import hookimpl
    from envengineer.loop.runconfig import EvalSection, parse_run_config, resolve, validation_set

    assert EvalSection().validation is None
    arith = parse_run_config({"name": "a", "task": "arith", "policy": {"name": "tiny", "prompt_style": "full"}})  # arith's one style
    assert validation_set(arith, arith_registry) == "arith-val" and validation_set(arith) is None
    assert resolve(arith, arith_registry).config.eval.validation == "arith-val"
    mapf = resolve(parse_run_config({"name": "m", "task": "mapf-frozenlake"}), arith_registry).config
    assert mapf.eval.validation == "mapf-2agents-val"  # MAPF's default, unchanged
    explicit = parse_run_config({"name": "m", "task": "mapf-frozenlake", "eval": {"validation": "mapf-3agents"}})
    assert resolve(explicit, arith_registry).config.eval.validation == "mapf-3agents"

    class Undeclared(ArithGenerator):
        name = "arith-undeclared"
        validation_benchmark = None

    class UndeclaredValidator(ArithValidator):
        name = "arith-undeclared"

    class Plugin:
        @hookimpl
        def register_generators(self, register):
            register(Undeclared)

        @hookimpl
        def register_validators(self, register):
            register(UndeclaredValidator)

    pm.register(Plugin(), name="undeclared")
    registry = Registry(pm)
    with pytest.raises(ConfigError, match=r"eval.validation: not set, and task arith-undeclared declares no validation benchmark "
                                          r"\(Generator.validation_benchmark\).*registers no benchmark"):
        resolve(parse_run_config({"name": "u", "task": "arith-undeclared", "policy": {"name": "tiny", "prompt_style": "full"}}), registry)
    given = parse_run_config({"name": "u", "task": "arith-undeclared", "eval": {"validation": "arith-val"}, "policy": {"name": "tiny", "prompt_style": "full"}})
    with pytest.raises(ConfigError, match="arith-val is a arith benchmark"):
        resolve(given, registry)


def test_resolve_names_the_field_of_an_unknown_benchmark(registry):
    from envengineer.errors import UnknownComponentError
    from envengineer.loop.runconfig import parse_run_config, resolve

    with pytest.raises(UnknownComponentError, match="eval.benchmarks: unknown benchmark 'nope'"):
        resolve(parse_run_config({"name": "m", "task": "mapf-frozenlake", "eval": {"benchmarks": ["nope"]}}), registry)
