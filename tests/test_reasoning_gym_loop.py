"""The reasoning-gym family in the loop: its compact style (the embedded tiny policy's), the curriculum
baseline raising its levels over rounds, a real (shrunk) run of examples/quickstart-reasoning-gym.yaml,
and ``envengineer context --run R --round 0 --preset V6`` on that run and on a recorded run over every
default dataset. Skips without the extra."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("reasoning_gym")

from envengineer.design.step import design  # noqa: E402
from envengineer.errors import ConfigError  # noqa: E402
from envengineer.design.evidence import Evidence  # noqa: E402
from envengineer.design.prompts import build_request  # noqa: E402
from envengineer.tasks.reasoning_gym import catalogue, compact  # noqa: E402

TASK = "reasoning-gym"
REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart-reasoning-gym.yaml"
#: The quickstart, shrunk for the test (the shipped file is the user's few minutes): a smaller model and warm
#: start, a few optimiser steps, part of the validation set.
SHRINK = [
    "policy.instances=300", "policy.epochs=1", "policy.hidden_size=32", "policy.layers=1", "policy.ffn=64",
    "rounds=2", "budget=24", "trainer.max_steps=1", "trainer.prefilter_samples=0", "trainer.num_generations=2",
    "trainer.per_device_train_batch_size=4", "eval.limit=40",
]


def cli(env: dict[str, str], *args: object) -> str:
    done = subprocess.run([sys.executable, "-c", "from envengineer.cli.commands import main; main()", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, f"envengineer {' '.join(map(str, args))} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout + done.stderr


# ------------------------------------------------------------------ the compact style


@pytest.fixture(scope="module")
def chain(registry_module):
    generator, validator = registry_module.task(TASK, {"datasets": ["chain_sum"]})
    config = generator.project({"datasets": {"chain_sum": {"num_terms": 3, "num_digits": 2}}}, generator.default_config()).config
    return generator, validator, generator.generate(config, n=40, seed=0).records


@pytest.fixture(scope="module")
def registry_module():
    from envengineer.plugin_manager import create_plugin_manager
    from envengineer.registry import Registry

    return Registry(create_plugin_manager(entry_points=False, environ={}))


def test_compact_prompts_are_the_expression_and_answers_the_bare_number(chain):
    generator, validator, records = chain
    assert "compact" in generator.prompt_styles
    for record in records:
        prompt = generator.render(record, "compact")
        assert prompt == record["metadata"]["expression"].replace(" ", "") + "=" and prompt in record["question"].replace(" ", "")
        assert all(32 <= ord(ch) < 127 for ch in prompt)  # the tiny policy's character tokenizer reads every character
        answer = generator.reference_completion(record, "compact")
        assert answer == record["answer"] and "<" not in answer
        verdict = validator.score(record, generator.decode_response(record, answer, "compact"))
        assert verdict.valid and verdict.optimal
    record = records[0]
    wrong = str(int(record["answer"]) + 1)
    assert not validator.score(record, generator.decode_response(record, wrong, "compact")).valid
    # the first line is the answer: what follows changes nothing, and the trainer leaves it out of the loss
    tail = f"{record['answer']}\n{wrong}</answer>junk"
    assert generator.answer_end(record, tail, "compact") == len(record["answer"])
    assert validator.score(record, generator.decode_response(record, tail, "compact")).optimal
    assert validator.score(record, generator.decode_response(record, "", "compact")).failure == "rejected"
    assert validator.score(record, generator.decode_response(record, "9" * 5000, "compact")).failure == "too_long"
    # the full style is unchanged
    assert generator.decode_response(record, "x", "full") == "x" and generator.render(record, "full")[1]["content"] == record["question"]


def test_a_compact_answer_scores_what_reasoning_gym_scores_on_the_line_as_written(chain):
    import reasoning_gym

    generator, validator, records = chain
    record = records[0]
    oracle = record["answer"]
    dataset = reasoning_gym.create_dataset("chain_sum", size=1, seed=0)
    item = {"question": record["question"], "answer": oracle, "metadata": record["metadata"]}
    for line in (f"junk<answer>{oracle}", f"<answer>{oracle}</answer>", f"{oracle}</answer>", f"<answer></answer>{oracle}", oracle):
        expected = dataset.score_answer(line, item)
        verdict = validator.score(record, generator.decode_response(record, line, "compact"))
        assert verdict.score == pytest.approx(expected), line
        assert verdict.optimal == (expected == 1.0), line
    assert validator.score(record, generator.decode_response(record, f"junk<answer>{oracle}", "compact")).failure == "wrong"


def test_the_compact_style_refuses_datasets_it_has_no_form_for(registry_module):
    generator, _ = registry_module.task(TASK)
    maze = next(r for r in generator.generate(generator.default_config(), n=12, seed=0).records if r["dataset"] == "maze")
    with pytest.raises(ValueError, match="renders chain_sum only"):
        generator.render(maze, "compact")
    # the engineer's failing examples show the question, without the system prompt every instance shares
    assert generator.example_prompt(maze) == maze["question"]
    with pytest.raises(ValueError, match="unknown prompt style"):
        generator.render(maze, "terse")


def test_warm_start_pairs_are_deterministic_low_level_chain_sums(chain, registry_module):
    generator, _, _ = chain
    pairs = generator.warm_start_pairs(n=200, seed=0, style="compact")
    assert pairs == generator.warm_start_pairs(n=200, seed=0, style="compact")
    assert pairs != generator.warm_start_pairs(n=200, seed=1, style="compact")
    # the same pairs whatever the run's other options (the tiny policy caches its base by task name and style)
    other, _ = registry_module.task(TASK, {"datasets": "chain_sum", "system_prompt": "Answer in <answer></answer>."})
    assert other.warm_start_pairs(n=200, seed=0, style="compact") == pairs
    # a run on datasets without a compact form is refused before its warm start
    default, _ = registry_module.task(TASK)
    with pytest.raises(ConfigError, match="renders chain_sum only"):
        default.warm_start_pairs(n=2, seed=0, style="compact")
    terms = [re.findall(r"[+-]?\d+", prompt[:-1]) for prompt, _ in pairs]
    assert {len(t) for t in terms} == {2, 3} and {len(x.lstrip("+-")) for t in terms for x in t} == {1, 2}  # levels 0-1
    for (prompt, answer), numbers in zip(pairs, terms):
        assert prompt.endswith("=") and sum(map(int, numbers)) == int(answer)
    assert max(len(p) for p, _ in pairs) <= 9 and generator.tiny_vocabulary("compact") is None
    assert len({p for p, _ in pairs}) > 150


def test_the_chain_sum_validation_set_is_frozen_and_rebuilds(registry_module):
    from envengineer.store.benchmarks import build, verify
    from envengineer.fileio import read_jsonl

    spec = registry_module.benchmark("rg-chain-sum-val")
    assert spec.task == TASK and dict(spec.options) == {"datasets": ["chain_sum"]}
    assert verify(registry_module, ["rg-chain-sum-val"]) == [] and build(registry_module, ["rg-chain-sum-val"], check=True) == []
    records = list(read_jsonl(spec.path))
    assert len(records) == 400 and {r["dataset"] for r in records} == {"chain_sum"}
    assert {tuple(sorted(r["levels"].items())) for r in records} == {
        (("num_digits", d), ("num_terms", t)) for d in range(3) for t in range(3)}
    generator, validator = registry_module.task(TASK, {"datasets": ["chain_sum"]})
    assert all(validator.score(r, generator.decode_response(r, generator.reference_completion(r, "compact"), "compact")).optimal
               for r in records)


# ------------------------------------------------------------------ the curriculum baseline


def _evidence(generator, config, round_, rounds_total):
    by = {name: {"n": 10, "valid": 5, "optimal": 5, "valid_rate": 0.5, "optimal_rate": 0.5, "failures": {"wrong": 5}}
          for name in generator.options.datasets}
    report = {"overall": {"n": 10 * len(by), "valid": 5 * len(by), "optimal": 5 * len(by), "valid_rate": 0.5,
                          "optimal_rate": 0.5, "failures": {"wrong": 5 * len(by)}}, "by": {"dataset": by}}
    return Evidence(task=generator, round=round_, rounds_total=rounds_total, config=config.model_dump(), report=report,
                    failure_types=("no_answer", "wrong"), history=[])


def test_curriculum_raises_levels_over_rounds(registry_module):
    generator = registry_module.create("generator", TASK, {"name": TASK})
    engineer = registry_module.create("engineer", "curriculum")
    config, table = generator.default_config(), []
    rounds_total = 5
    for round_ in range(rounds_total - 1):
        outcome = design(engineer, build_request(_evidence(generator, config, round_, rounds_total), registry_module, {"modules": ["F"]}))
        assert not outcome.fallback, outcome.reason
        config = outcome.config
        table.append({name: row.model_dump() for name, row in config.datasets.items()})
    for name in catalogue.DEFAULT_DATASETS:
        caps = catalogue.CATALOGUE[name].caps
        for attr, cap in caps.items():
            levels = [row[name][attr] for row in table]
            assert levels == sorted(levels) and all(0 <= level <= cap for level in levels), (name, attr, levels)
    total = [sum(row[name][attr] for name in catalogue.DEFAULT_DATASETS for attr in catalogue.CATALOGUE[name].caps) for row in table]
    assert 0 < total[0] < total[-1], total  # above the default's zeros after the first design, higher still at the end
    # the datasets with room to move end harder than after the first design (maze and shortest_path have caps 3 and 1:
    # the ramp's 20-60 % of them rounds to the same level)
    for name in ("chain_sum", "knights_knaves", "mini_sudoku", "tower_of_hanoi"):
        assert sum(table[-1][name][a] for a in catalogue.CATALOGUE[name].caps) > sum(table[0][name][a] for a in catalogue.CATALOGUE[name].caps), name
    assert all(abs(sum(row[n]["ratio"] for n in row) - 1) < 1e-6 for row in table)


# ------------------------------------------------------------------ a real run and its context


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("rg-run")
    cache = root / "cache"
    cache.mkdir()
    environ = {**os.environ, "ENVENGINEER_CACHE": str(cache), "COLUMNS": "200"}
    environ.pop("ENVENGINEER_LOAD_PLUGINS", None)
    return {"env": environ, "root": root}


@pytest.fixture(scope="module")
def rg_run(env):
    pytest.importorskip("trl")
    run_dir = env["root"] / "run"
    out = cli(env["env"], "run", QUICKSTART, *SHRINK, f"output={run_dir}")
    return run_dir, out


def test_the_quickstart_names_its_parts():
    config = yaml.safe_load(QUICKSTART.read_text())
    assert config["task"] == {"name": TASK, "datasets": ["chain_sum"]}
    assert (config["policy"]["name"], config["policy"]["prompt_style"], config["trainer"]["name"], config["engineer"]["name"]) == (
        "tiny", "compact", "trl", "heuristic")
    assert config["eval"]["validation"] == "rg-chain-sum-val"


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_a_shrunk_quickstart_runs_and_its_context_shows_datasets_and_real_prompts(env, rg_run):
    run_dir, out = rg_run
    assert "per-round results on rg-chain-sum-val" in out and "fallback" not in out
    summary = json.loads((run_dir / "round-00" / "eval" / "summary.json").read_text())
    assert summary["overall"]["n"] == 40 and set(summary["by"]["dataset"]) == {"chain_sum"}
    context = cli(env["env"], "context", "--run", run_dir, "--round", "0", "--preset", "V6")
    assert "By dataset:" in context and "| chain_sum |" in context, context
    assert "num_terms" in context and "num_digits" in context  # the knob table and the guidelines' levels
    assert "agents" not in context and "hole" not in context
    examples = [json.loads(line) for line in (run_dir / "round-00" / "eval" / "examples.jsonl").read_text().splitlines()]
    val = {r["id"]: r for r in map(json.loads, (REPO / "tasks" / "reasoning_gym" / "data" / "rg-chain-sum-val.jsonl").open())}
    assert examples, "the shrunk policy solves every sum"
    for example in examples:  # real prompts: the validation records as the policy read them
        assert example["prompt"] == compact.render(val[example["id"]]) and example["prompt"] in context


def test_the_context_of_a_run_on_every_default_dataset(env, registry_module):
    """A recorded run over the six default datasets (evaluated with a stand-in policy that answers right on every
    other record): the context tables have a row per dataset and the examples are full reasoning-gym questions."""
    from envengineer.loop.evaluation import evaluate, failing_examples, write_eval
    from envengineer.fileio import read_jsonl

    from envengineer.components import Policy

    generator, validator = registry_module.task(TASK)
    per_dataset: dict[str, list] = {}
    for record in read_jsonl(registry_module.benchmark("rg-val").path):
        per_dataset.setdefault(record["dataset"], []).append(record)
    records = [rows[i] for i in range(0, 40, 4) for rows in per_dataset.values()]  # the datasets in turn

    class Alternating(Policy):
        name = "alternating"

        def failed_calls(self):
            return []

        def sample(self, prompts, n=1):
            return [[answers[prompt[-1]["content"]]] * n for prompt in prompts]

    wrong = ("no tags", "<answer>no</answer>")  # no_answer, then rejected (or a dataset's own failure)
    answers = {r["question"]: generator.reference_answer(r) if i % 3 == 2 else wrong[i % 3] for i, r in enumerate(records)}

    run = env["root"] / "recorded"
    (run / "round-00").mkdir(parents=True)
    (run / "run.yaml").write_text(yaml.safe_dump({
        "name": "recorded", "task": {"name": TASK}, "rounds": 2, "seed": 0, "budget": 60, "context": {"preset": "V6"},
        "engineer": {"name": "heuristic"}, "policy": {"name": "tiny"}, "trainer": {"name": "trl"},
        "eval": {"validation": "rg-val", "benchmarks": []},
    }, sort_keys=False))
    (run / "round-00" / "config.yaml").write_text(yaml.safe_dump(generator.default_config().model_dump(), sort_keys=False))
    result = evaluate(Alternating(), generator, validator, records)
    write_eval(run / "round-00" / "eval", result, failing_examples(result, generator))
    context = cli(env["env"], "context", "--run", run, "--round", "0", "--preset", "V6")
    table = context.split("By dataset:", 1)[1]
    for name in catalogue.DEFAULT_DATASETS:
        assert f"| {name} |" in table, name
    examples = [json.loads(line) for line in (run / "round-00" / "eval" / "examples.jsonl").read_text().splitlines()]
    by_id = {r["id"]: r for r in records}
    shown = [e for e in examples if f"Example {e['id']} " in context]
    assert len({e["group"] for e in shown}) >= 3, shown
    for example in shown:  # the real instances: chain_sum compactly, the others' questions (the F module shows 400 characters)
        record = by_id[example["id"]]
        expected = compact.render(record) if record["dataset"] == "chain_sum" else record["question"]
        assert example["prompt"] == expected[:600] and expected[:300] in context, example["id"]
