"""The ``verifiers`` task family (tasks/verifiers, issue 35): a verifiers 0.4.0 taskset as an envengineer family.

The fixture tasksets are in tests/vf_tasksets (vf-toy-sums: knob fields and one reward; one module per refusal).
Tests that need verifiers skip without it (it is the ``verifiers`` extra; Python >= 3.11); the ones about the
family's module, its options and the Python refusal run everywhere.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from envengineer.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "vf_tasksets"
SUMS = {
    "taskset": "vf-toy-sums", "seed_field": "seed", "size_field": "num_tasks", "answer_field": "answer",
    "knobs": {"num_terms": {"harder": "up"}, "max_operand": {"range": [1, 99], "harder": "up"}},
}
GROUPED = {**SUMS, "groups": {"field": "op", "values": ["add", "sub"]}}
#: The worked example of docs/verifiers.md: two rounds on GROUPED.
RUN = FIXTURES / "run.yaml"


@pytest.fixture
def fixtures_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))


def family(options):
    from envengineer.testing import load_task

    return load_task("verifiers", {"name": "verifiers", **options})


def refusal(options) -> str:
    with pytest.raises(ConfigError) as caught:
        family(options)
    return str(caught.value)


# ------------------------------------------------------------------ without verifiers


def test_the_plugin_module_loads_without_importing_verifiers():
    code = ("import sys, envengineer.tasks.verifiers.plugin\n"
            "from envengineer.registry import load_registry\n"
            "assert 'verifiers' in {e.name for e in load_registry().entries('generator')}\n"
            "print(sorted(m for m in sys.modules if m == 'verifiers' or m.startswith('verifiers.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_python_3_10_is_refused_before_verifiers_is_imported():
    from envengineer.tasks.verifiers.taskset import check_python

    with pytest.raises(ConfigError, match=r"needs Python >= 3\.11 \(verifiers 0\.4\.0 requires it\); this is Python 3\.10\.14"):
        check_python((3, 10, 14))
    check_python((3, 11, 0))  # accepted


def test_a_missing_verifiers_names_the_extra(monkeypatch):
    from envengineer.tasks.verifiers import taskset

    monkeypatch.setitem(sys.modules, "verifiers", None)  # import verifiers... raises ImportError
    monkeypatch.delitem(sys.modules, "verifiers.v1.utils", raising=False)
    monkeypatch.delitem(sys.modules, "verifiers.v1.utils.loaders", raising=False)
    monkeypatch.delitem(sys.modules, "verifiers.v1", raising=False)
    with pytest.raises(ConfigError, match=r'pip install "envengineer\[verifiers\]"'):
        taskset.vf()


def test_options_refuse_a_taskset_that_cannot_change_with_the_round():
    from envengineer.tasks.verifiers.knobs import VFOptions

    with pytest.raises(ValueError, match="has no seed field and shuffle is off, so its tasks would not change with the round"):
        VFOptions.model_validate({**SUMS, "seed_field": None})
    with pytest.raises(ValueError, match="field 'num_terms' is already seed_field"):
        VFOptions.model_validate({**SUMS, "seed_field": "num_terms"})


# ------------------------------------------------------------------ with verifiers

needs_verifiers = pytest.mark.skipif(sys.version_info < (3, 11), reason="verifiers needs Python >= 3.11")


@pytest.fixture
def vf(fixtures_on_path):
    pytest.importorskip("verifiers.v1", reason='the verifiers extra: pip install -e ".[verifiers]"')
    from verifiers.v1.utils import loaders

    return loaders


def verifiers_reward(task, reply: str, messages) -> float:
    """verifiers' own scoring, called here directly: ``await task.score(trace)`` on an offline trace."""
    from verifiers.v1.configs.agent import AgentConfig
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, Trace, TraceTask
    from verifiers.v1.types import AssistantMessage, SystemMessage, UserMessage

    kinds = {"system": SystemMessage, "user": UserMessage}
    nodes = [MessageNode(parent=i - 1 if i else None, message=kinds[m["role"]](content=m["content"])) for i, m in enumerate(messages)]
    nodes.append(MessageNode(parent=len(nodes) - 1, message=AssistantMessage(content=reply), sampled=True))
    trace = Trace(task=TraceTask(type=type(task).__name__, data=task.data, key=task.key), agent=AgentInfo(config=AgentConfig()), nodes=nodes)
    asyncio.run(task.score(trace))
    assert trace.rewards, "verifiers recorded no reward"
    return trace.reward


@needs_verifiers
@pytest.mark.parametrize("options", [pytest.param(SUMS, marks=pytest.mark.long), GROUPED], ids=["one-group", "groups-by-op"])  # one-group: the long tier
def test_the_fixture_taskset_passes_the_conformance_kit(vf, options):
    from envengineer.testing import assert_task_conforms

    assert_task_conforms("verifiers", {"name": "verifiers", **options}, n=8, fuzz=80)


@needs_verifiers
def test_knobs_are_the_declared_fields_with_their_bounds(vf):
    generator, _ = family(GROUPED)
    knobs = {k.name: k for k in generator.knobs}
    assert set(knobs) == {"ratio", "num_terms", "max_operand"}  # op is the groups' field, seed and num_tasks are set by the family
    assert (knobs["num_terms"].low, knobs["num_terms"].high, knobs["num_terms"].integer) == (2, 6, True)  # the field's ge/le
    assert (knobs["max_operand"].low, knobs["max_operand"].high) == (1, 99)  # the run config's range
    assert knobs["ratio"].share
    start = generator.default_config().model_dump()
    assert start == {"groups": {"add": {"ratio": 0.5, "num_terms": 2, "max_operand": 9}, "sub": {"ratio": 0.5, "num_terms": 2, "max_operand": 9}}}
    with pytest.raises(Exception, match=r"groups\.add\.max_operand"):
        generator.config_model.model_validate({"groups": {**start["groups"], "add": {"ratio": 0.5, "num_terms": 2, "max_operand": 500}}})
    with pytest.raises(Exception, match="groups must be exactly add, sub"):
        generator.config_model.model_validate({"groups": {"add": start["groups"]["add"]}})


@needs_verifiers
def test_declarations_the_taskset_refuses_name_the_field(vf):
    wide = {**SUMS, "knobs": {"max_operand": {"range": [1, 5000]}}}
    assert "task.knobs.max_operand.range: high = 5000 is outside what 'vf-toy-sums' accepts for 'max_operand'" in refusal(wide)
    assert "task.knobs.op: 'vf-toy-sums''s field 'op' is" in refusal({**SUMS, "knobs": {"op": {}}})
    unbounded = {**SUMS, "seed_field": None, "size_field": None, "shuffle": True, "knobs": {"seed": {}}}
    assert "task.knobs.seed: 'vf-toy-sums''s field 'seed' declares no ge/le bounds: give its range" in refusal(unbounded)
    assert "task.knobs: 'num_term' is no field of 'vf-toy-sums''s SumConfig" in refusal({**SUMS, "knobs": {"num_term": {}}})
    assert "task.seed_field: 'rng_seed' is no field" in refusal({**SUMS, "seed_field": "rng_seed"})
    assert "task.groups.values: 'mul' is no value of 'vf-toy-sums''s 'op'" in refusal({**GROUPED, "groups": {"field": "op", "values": ["add", "mul"]}})


@needs_verifiers
def test_undeclared_fields_are_never_touched(vf):
    """Only the knobs, the group's field, the seed and size fields are set; fixed ones stay as given, the rest at the taskset's
    defaults (op is add although sub would be a valid value)."""
    generator, _ = family({**SUMS, "fixed": {"num_terms": 3}, "knobs": {"max_operand": {"range": [1, 99]}}})
    config = generator.taskset.config({"max_operand": 40}, seed=5, size=7)
    assert config.model_dump(include={"num_terms", "max_operand", "seed", "num_tasks", "op"}) == {
        "num_terms": 3, "max_operand": 40, "seed": 5, "num_tasks": 7, "op": "add"}
    records = generator.generate(generator.default_config(), n=5, seed=3).records
    assert {r["task"]["op"] for r in records} == {"add"} and all(r["task"]["prompt"].count("+") == 2 for r in records)


@needs_verifiers
def test_generation_is_verifiers_own_load_taskset_with_the_rounds_seed(vf):
    from envengineer.tasks.verifiers.taskset import seed_value

    generator, _ = family(GROUPED)
    config = generator.config_model.model_validate(
        {"groups": {"add": {"ratio": 0.25, "num_terms": 3, "max_operand": 50}, "sub": {"ratio": 0.75, "num_terms": 2, "max_operand": 20}}})
    records = generator.generate(config, n=8, seed=11).records
    assert [r["group"] for r in records] == ["add"] * 2 + ["sub"] * 6  # split_budget of the shares
    for group, count, terms, top in (("add", 2, 3, 50), ("sub", 6, 2, 20)):
        cfg = vf.taskset_config_type("vf-toy-sums")(id="vf-toy-sums", op=group, num_terms=terms, max_operand=top,
                                                    seed=seed_value(11, group), num_tasks=count)
        tasks = list(vf.load_taskset(cfg))
        mine = [r for r in records if r["group"] == group]
        assert [r["key"] for r in mine] == [t.key for t in tasks]
        assert [r["task"]["prompt"] for r in mine] == [t.data.prompt for t in tasks]
    again = generator.generate(config, n=8, seed=12).records
    assert not {r["key"] for r in again} & {r["key"] for r in records}


@needs_verifiers
def test_a_taskset_without_a_seed_field_is_drawn_with_verifiers_own_shuffle(vf):
    from envengineer.tasks.verifiers.taskset import seed_value

    pool = {**SUMS, "seed_field": None, "shuffle": True, "size_field": None, "fixed": {"num_tasks": 300, "seed": 3}}
    generator, _ = family(pool)
    records = generator.generate(generator.default_config(), n=6, seed=21).records
    cfg = vf.taskset_config_type("vf-toy-sums")(id="vf-toy-sums", num_tasks=300, seed=3)
    view = vf.load_taskset(cfg).shuffle(seed_value(21, "all")).take(6)
    assert [r["key"] for r in records] == [t.key for t in view]
    assert {r["key"] for r in generator.generate(generator.default_config(), n=6, seed=22).records} != {r["key"] for r in records}
    small = {**pool, "fixed": {"num_tasks": 4, "seed": 3}}  # four tasks in all: every round would get the same four
    assert "gives the same tasks for two round seeds through verifiers' shuffle(seed) view" in refusal(small)
    assert "size_field: with shuffle, each round draws from the whole of the taskset's load()" in refusal({**pool, "size_field": "num_tasks"})


@needs_verifiers
def test_the_verdict_is_the_tasksets_own_reward(vf):
    generator, validator = family(SUMS)
    record = generator.generate(generator.default_config(), n=1, seed=0).records[0]
    task = generator.taskset.task_of(record)
    answer = record["task"]["answer"]
    for reply, valid, failure in ((answer, True, None), (f"it is {answer}", False, "partial"), ("no idea", False, "zero"), ("", False, "zero")):
        verdict = validator.score(record, reply)
        assert verdict.score == verifiers_reward(task, reply, generator.render(record))
        assert (verdict.valid, verdict.failure) == (valid, failure)
    assert validator.score(record, "9" * 40_000).failure == "too_long"
    assert validator.score({**record, "task": {"prompt": 3}}, answer).failure == "bad_record"
    lenient = family({**SUMS, "valid_threshold": 0.5})[1]
    assert lenient.score(record, f"it is {answer}").valid


@needs_verifiers
def test_a_reward_past_the_timeout_is_a_verdict_not_a_hang(vf):
    import time

    slow = {**SUMS, "score_timeout_s": 0.3, "fixed": {"task": {"rewards": {"correct": {"fn": "vf_slow.slow"}}}}}
    generator, validator = family(slow)
    record = generator.generate(generator.default_config(), n=1, seed=0).records[0]
    started = time.perf_counter()
    verdict = validator.score(record, record["task"]["answer"])
    assert verdict.failure == "reward_timeout" and not verdict.valid
    assert time.perf_counter() - started < 3


@needs_verifiers
def test_refusals_each_with_its_reason(vf):
    assert "is a multi-turn environment (its package exports TwoTurnEnv, whose Env.run() plays several turns or agents)" in refusal(
        {**SUMS, "taskset": "vf-multi-turn"})
    assert "'vf-sandbox-reward''s reward tests_pass needs a runtime (a sandbox: its signature takes `runtime`)" in refusal(
        {**SUMS, "taskset": "vf-sandbox-reward"})
    judged = {**SUMS, "fixed": {"task": {"judges": [{"id": "reference"}]}}}
    assert "scores with an LLM judge (reference)" in refusal(judged) and "task.allow_judges: true" in refusal(judged)
    family({**judged, "allow_judges": True})  # accepted when asked for (nothing is scored here: no judge is called)
    assert "'vf-hub-data' reached for the network while loading (create_connection(('huggingface.co', 443)))" in refusal({**SUMS, "taskset": "vf-hub-data"})
    assert "gives the same tasks for two round seeds through its seed field 'seed' (a seed hard-coded in the module?)" in refusal(
        {**SUMS, "taskset": "vf-constant-seed"})
    assert "task SilentTask has no @vf.reward (and no judge): nothing to score with" in refusal({**SUMS, "taskset": "vf-no-reward"})
    assert "verifiers could not load taskset 'vf-not-installed'" in refusal({**SUMS, "taskset": "vf-not-installed"})


@needs_verifiers
def test_a_proposal_the_tasksets_load_refuses_keeps_the_current_config(vf, monkeypatch):
    import vf_toy_sums

    generator, _ = family(SUMS)
    current = generator.default_config()
    original = vf_toy_sums.SumTaskset.load

    def asserting(self):  # a cross-field constraint written as an assert inside load(), as tasksets do
        assert self.config.max_operand < 50 or self.config.num_terms < 4, "too many large terms"
        yield from original(self)

    monkeypatch.setattr(vf_toy_sums.SumTaskset, "load", asserting)
    projection = generator.project({"num_terms": 5, "max_operand": 80}, current)
    assert projection.config.model_dump() == current.model_dump()
    assert "the taskset's load() refuses it" in projection.changes[-1].reason and "too many large terms" in projection.changes[-1].reason
    assert generator.project({"num_terms": 5, "max_operand": 20}, current).config.model_dump() == {"num_terms": 5, "max_operand": 20}


# ------------------------------------------------------------------ the loop, from the command line


def _environment(root: Path) -> dict[str, str]:
    """The fixture package's plugin found by its entry point: a dist-info beside it on PYTHONPATH."""
    info = root / "site" / "vf_toy-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vf-toy\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[envengineer]\nvf_toy = vf_toy_plugin\n")
    (root / "cache").mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FIXTURES), str(info.parent)]), "ENVENGINEER_CACHE": str(root / "cache"), "COLUMNS": "200"}
    env.pop("ENVENGINEER_LOAD_PLUGINS", None)
    return env


def cli(env, *args, cwd):
    out = subprocess.run([sys.executable, "-c", "from envengineer.cli.commands import main; main()", *map(str, args)],
                         capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    assert out.returncode == 0, f"envengineer {' '.join(map(str, args))} exited {out.returncode}:\n{out.stdout}{out.stderr}"
    return out.stdout + out.stderr


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    if sys.version_info < (3, 11):
        pytest.skip("verifiers needs Python >= 3.11")
    pytest.importorskip("verifiers.v1", reason='the verifiers extra: pip install -e ".[verifiers]"')
    root = tmp_path_factory.mktemp("vf-run")
    env = _environment(root)
    config = yaml.safe_load(RUN.read_text())
    assert config["task"] == {"name": "verifiers", **GROUPED} and config["rounds"] == 2
    out = cli(env, "run", RUN, f"output={root / 'out'}", cwd=root)
    return {"root": root, "env": env, "out": out, "dir": root / "out"}


def test_the_frozen_validation_set_verifies_and_rebuilds_identically(toy_run):
    text = cli(toy_run["env"], "bench", "verify", "vf-toy-sums-val", cwd=toy_run["root"])
    assert "ok" in text and "vf-toy-sums-val" in text
    assert "identical" in cli(toy_run["env"], "bench", "build", "vf-toy-sums-val", "--check", cwd=toy_run["root"])


def test_two_rounds_run_and_round_1_trains_on_the_engineers_config(toy_run, fixtures_on_path):
    from verifiers.v1.utils import loaders

    run = toy_run["dir"]
    first = yaml.safe_load((run / "round-00" / "config.yaml").read_text())
    second = yaml.safe_load((run / "round-01" / "config.yaml").read_text())
    assert first != second  # the curriculum engineer changed it
    assert "per-round results on vf-toy-sums-val" in toy_run["out"]
    cli(toy_run["env"], "report", run, cwd=toy_run["root"])
    assert (run / "report.html").stat().st_size > 0
    records = [json.loads(line) for line in (run / "round-01" / "train.jsonl").read_text().splitlines()]
    assert len(records) == 24
    for group, row in second["groups"].items():
        mine = [r for r in records if r["group"] == group]
        assert mine and all((r["num_terms"], r["max_operand"]) == (row["num_terms"], row["max_operand"]) for r in mine)
        cfg = loaders.taskset_config_type("vf-toy-sums")(id="vf-toy-sums", op=group, num_terms=row["num_terms"],
                                                         max_operand=row["max_operand"], seed=mine[0]["seed"], num_tasks=len(mine))
        assert [t.key for t in loaders.load_taskset(cfg)] == [r["key"] for r in mine]


def test_every_reward_in_rollouts_is_verifiers_own_score(toy_run, fixtures_on_path):
    """The simulated student writes the reference answer for a task it solves and an empty reply otherwise; each GRPO reward
    in rollouts.jsonl must be verifiers' own task.score of one of those two completions, and the valid count the number of
    rewards that reach the threshold."""
    from envengineer.tasks.verifiers.taskset import messages_of
    from verifiers.v1.utils import loaders

    task_cls = loaders.taskset_class("vf-toy-sums").task_type()
    checked = 0
    for round_dir in ("round-00", "round-01"):
        run = toy_run["dir"] / round_dir
        records = {r["id"]: r for r in map(json.loads, (run / "train.jsonl").read_text().splitlines())}
        for line in map(json.loads, (run / "train" / "rollouts.jsonl").read_text().splitlines()):
            record = records[line["id"]]
            task = task_cls(task_cls.data_type().model_validate(record["task"]))
            messages = messages_of(record["task"])
            solved, unsolved = (verifiers_reward(task, reply, messages) for reply in (record["task"]["answer"], ""))
            rewards = [r for group in line["groups"] for r in group]
            assert rewards and all(r in (solved, unsolved) for r in rewards), line
            assert line["valid"] == sum(r >= 1.0 for r in rewards)
            assert line["score"] == pytest.approx(sum(rewards) / len(rewards), abs=1e-6)
            checked += len(rewards)
    assert checked == 2 * 24 * 4
