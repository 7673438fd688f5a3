"""What an outside plugin author hits: the core assumes no task family (MAPF-FrozenLake or any
other), and its names, help texts and docs say what they do for any task."""

import pytest
from typer.testing import CliRunner

from envengineer.errors import ConfigError
from envengineer.plugin_manager import create_plugin_manager
from envengineer.registry import Registry

FAMILIES = "grid-walk, mapf-frozenlake, reasoning-gym, verifiers"


@pytest.fixture
def one_family():
    """A registry in which grid-walk is the only task family installed."""
    return Registry(create_plugin_manager(entry_points=False, environ={}, block=("mapf_frozenlake", "reasoning_gym", "verifiers")))


# ------------------------------------------------------------- 1. the task is named, never assumed


def test_a_run_config_without_a_task_names_the_field_and_the_installed_families(registry):
    from envengineer.loop.runconfig import RunConfig, parse_run_config

    assert RunConfig.model_fields["task"].is_required()
    for data, field in (({"name": "x"}, "task"), ({"name": "x", "task": None}, "task"), ({"name": "x", "task": {"agents": 2}}, "task.name")):
        with pytest.raises(ConfigError) as caught:
            parse_run_config(data, "x.yaml", registry)
        assert str(caught.value) == f"x.yaml: {field}: required when more than one task family is installed; name one of: {FAMILIES}"


def test_a_run_config_without_a_task_runs_the_only_installed_family(one_family):
    from envengineer.loop.runconfig import parse_run_config

    assert one_family.names("generator") == ["grid-walk"]
    assert parse_run_config({"name": "x"}, registry=one_family).task == {"name": "grid-walk"}
    assert parse_run_config({"name": "x", "task": {"prompt_style": "compact"}}, registry=one_family).task == {"name": "grid-walk", "prompt_style": "compact"}
    assert parse_run_config({"name": "x", "task": "mapf-frozenlake"}, registry=one_family).task == {"name": "mapf-frozenlake"}  # named: as given
    empty = Registry(create_plugin_manager(builtins=(), entry_points=False, environ={}))
    with pytest.raises(ConfigError, match="task: required, and no task family is installed"):
        parse_run_config({"name": "x"}, registry=empty)


def test_envengineer_run_without_a_task_stops_before_writing(tmp_path, capsys):
    from envengineer.cli.commands import main

    path = tmp_path / "no-task.yaml"
    path.write_text(f"name: x\nengineer: fixed\noutput: {tmp_path / 'run'}\n")
    with pytest.raises(SystemExit) as exited:
        main(["run", str(path), "--dry-run"])
    assert exited.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "task: required when more than one task family is installed" in err and FAMILIES in err
    assert not (tmp_path / "run").exists()


def test_pretrain_without_task_names_the_option_and_the_installed_families(monkeypatch):
    import envengineer.registry
    from envengineer.cli.commands import app

    monkeypatch.setattr(envengineer.registry, "load_registry", lambda *a, **k: Registry(create_plugin_manager(entry_points=False, environ={})))
    result = CliRunner().invoke(app, ["pretrain", "--limit", "1"])
    assert isinstance(result.exception, ConfigError)
    assert str(result.exception) == f"--task: required when more than one task family is installed; name one of: {FAMILIES}"


# ------------------------------------------------------------- 2. the heuristic's practice options

SIZES = ("3x3", "4x4", "5x5", "6x6", "7x7", "8x8", "9x9", "10x10")
RENAMED = {"conflict_failure": "practice_failure", "conflict_share": "practice_share", "wait_knob": "practice_knob", "wait_step": "practice_step"}


def test_the_heuristics_old_mapf_option_names_are_refused_naming_the_new_ones(registry):
    fields = registry.get("engineer", "heuristic").Options.model_fields
    assert set(RENAMED.values()) <= set(fields) and not set(RENAMED) & set(fields)
    assert "practices" in fields["practice_knob"].description and "practices" in fields["practice_failure"].description
    for old, new in RENAMED.items():
        value = "conflict" if "failure" in old else "wait_ratio" if "knob" in old else 0.4
        with pytest.raises(ConfigError) as caught:
            registry.create("engineer", "heuristic", {old: value}, where="engineer.heuristic")
        assert f"engineer.heuristic: Value error, {old}: was renamed {new} (same meaning and default): write {new}: {value}" == str(caught.value)


def test_the_heuristics_practice_options_do_what_they_say(registry, recorded_run, report_factory):
    """Where a knob's declared practice dominates a group's validation failures (mapf-frozenlake:
    wait_ratio practises conflict), that knob rises by practice_step; practice_share sets the bar,
    practice_knob and practice_failure pick another knob and failure type."""
    from envengineer.design.step import design
    from envengineer.design.evidence import load_evidence
    from envengineer.design.prompts import build_request

    evidence = load_evidence(recorded_run, 1, registry)
    evidence.report = report_factory(dict(zip(SIZES, (0.9, 0.9, 0.9, 0.6, 0.6, 0.5, 0.4, 0.0))), conflict_share=0.8)
    request = build_request(evidence, registry, {"modules": ["F"]})
    before = request.current_config.sizes["9x9"]

    def after(**options):
        return design(registry.create("engineer", "heuristic", options), request).config.sizes["9x9"]

    assert after(practice_step=0.25).wait_ratio == pytest.approx(before.wait_ratio + 0.25)
    assert after(practice_step=0.25, practice_share=0.9).wait_ratio == before.wait_ratio  # 80% conflicts: under the bar
    moved = after(practice_knob="hole_ratio", practice_failure="conflict", practice_step=0.05)
    assert moved.hole_ratio == pytest.approx(before.hole_ratio + 0.05) and moved.wait_ratio == before.wait_ratio
    assert after(practice_knob="hole_ratio", practice_step=0.05).hole_ratio == before.hole_ratio  # hole_ratio declares no practices


# ------------------------------------------------------------- 3. the trl trainer's reward function


def test_the_trl_reward_function_has_a_task_neutral_name(registry, tmp_path):
    """TRL logs a reward function's mean and std under its __name__ (rewards/<name>/mean)."""
    pytest.importorskip("trl")
    from envengineer.components.training import TrainRequest

    generator, validator = registry.task("grid-walk")
    records = generator.generate(generator.default_config(), n=2, seed=1).records
    request = TrainRequest(policy_path=tmp_path, records=records, generator=generator, validator=validator, out_dir=tmp_path)
    reward = registry.create("trainer", "trl", {}).reward_fn(request, records)
    assert reward.__name__ == "task_reward"
    assert reward(prompts=["p"], completions=["no answer"], record_index=[0]) == [0.0]


# ------------------------------------------------------------- 4. help texts that hold for any task

MAPF_WORDS = r"mapf|frozenlake|\bagents?\b|conflict|wait_ratio|hole_ratio|\bwaits\b"


def _field_texts(model, where):
    """(where, description) of every field of a pydantic model and of the models nested in it."""
    import typing

    from pydantic import BaseModel

    seen, todo, out = set(), [(model, where)], []
    while todo:
        model, where = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, field in model.model_fields.items():
            out.append((f"{where}.{name}", field.description or ""))
            stack = [field.annotation]
            while stack:
                tp = stack.pop()
                if isinstance(tp, type) and issubclass(tp, BaseModel):
                    todo.append((tp, f"{where}.{name}"))
                stack.extend(typing.get_args(tp))
    return out


def test_help_texts_and_option_descriptions_say_when_they_speak_of_one_task(registry):
    """A help text or an option's description outside the task families that speaks of MAPF says
    so ("mapf-frozenlake: ..."), never offers it as what every task has."""
    import re

    import typer

    from envengineer.cli.commands import app
    from envengineer.loop.runconfig import RunConfig

    texts = []
    command = typer.main.get_command(app)

    def walk(cmd, path):
        texts.append((path, cmd.help or ""))
        texts.extend((f"{path} {p.name}", getattr(p, "help", None) or "") for p in cmd.params)
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(command, "envengineer")
    texts += _field_texts(RunConfig, "run config")
    for entry in registry.entries():
        if entry.kind in ("generator", "validator", "benchmark"):
            continue  # a task family's own texts may speak of its task
        texts.append((f"{entry.kind} {entry.name}", entry.description))
        texts += _field_texts(entry.obj.Options, f"{entry.kind}.{entry.name}")
    assert len(texts) > 200
    loose = [(where, text) for where, text in texts if re.search(MAPF_WORDS, text, re.I) and "mapf-frozenlake:" not in text]
    assert not loose, loose


# ------------------------------------------------------------- 5. envengineer plugins --options NAME


@pytest.fixture
def plugins_cli(monkeypatch):
    """``invoke(*args)``: ``envengineer plugins ARGS`` through typer's CliRunner, printed wide, with
    its exit code and its output (stdout and stderr) on one line."""
    monkeypatch.setenv("ENVENGINEER_LOAD_PLUGINS", "")  # the built-ins only, whatever third-party package is installed
    from rich.console import Console

    from envengineer.cli import commands as cli

    monkeypatch.setattr(cli.state, "console", Console(width=400))
    monkeypatch.setattr(cli.state, "err_console", Console(width=400, stderr=True))

    def invoke(*args):
        result = CliRunner().invoke(cli.app, ["plugins", *args])
        return result.exit_code, " ".join(result.output.split())  # the runner's output holds stderr too

    return invoke


def _row(*cells):
    return " │ ".join(cells)


def test_plugins_options_prints_a_components_options(plugins_cli):
    code, out = plugins_cli("--options", "tiny")
    assert code == 0 and "policy tiny (envengineer.plugins.policies): the run config's policy: section" in out
    assert "field ┃ type ┃ default ┃ description" in out
    assert _row("prompt_style", "str", "compact", "the task's prompt style") in out
    assert _row("cache_dir", "str | None", "null", "default:") in out
    code, out = plugins_cli("--options", "trl")
    assert code == 0 and _row("reward", "'valid' | 'score'", "valid", "valid: R_acc") in out
    assert _row("generation_batch_size", "int | None", "null") in out
    code, out = plugins_cli("--options", "learnability")
    assert code == 0 and _row("difficulty_knobs", "list[str] | None", "null", "knobs that make a group harder") in out
    code, out = plugins_cli("--options", "curriculum")
    assert code == 0 and _row("ramps", "dict[str, RampOptions]", "{}") in out and "RampOptions (in ramps)" in out  # nested options too


def test_plugins_options_of_a_name_several_kinds_share(plugins_cli):
    code, out = plugins_cli("--options", "grid-walk")  # a task: its generator and its validator
    assert code == 0 and "grid-walk is registered as 2 kinds of component (generator, validator); --kind picks one" in out
    assert "generator grid-walk (envengineer.tasks.gridwalk.plugin): task options: the run config's task: section" in out
    assert _row("prompt_style", "'full' | 'compact'", "full") in out and _row("warm_start_max_moves", "int", "4") in out
    assert "validator grid-walk (envengineer.tasks.gridwalk.plugin): no options" in out
    for kind in ("task", "generator"):
        code, out = plugins_cli("--options", "grid-walk", "--kind", kind)
        assert code == 0 and "warm_start_max_moves" in out and "validator" not in out and "kinds of component" not in out
    code, out = plugins_cli("--options", "simulated", "--kind", "trainer")
    assert code == 0 and "trainer simulated" in out and "policy simulated" not in out and "initial_skill" not in out
    code, out = plugins_cli("--options", "mapf-3agents")
    assert code == 0 and "benchmark mapf-3agents: a frozen set of task mapf-frozenlake (drawn under task options agents: 3)" in out


def test_plugins_options_of_an_unknown_name_exits_2_listing_the_names(plugins_cli):
    code, out = plugins_cli("--options", "nope")
    assert code == 2 and "--options nope: no component is called 'nope'; registered: generator: grid-walk, mapf-frozenlake, reasoning-gym, verifiers;" in out
    assert "engineer: base, checkpoint, critic, curriculum," in out and "policy: openai-compatible, simulated, tiny, transformers, vllm" in out
    code, out = plugins_cli("--options", "tiny", "--kind", "engineer")
    assert code == 2 and "no engineer is called 'tiny' (registered as policy: pass --kind policy); registered: engineer: base," in out
    code, out = plugins_cli("--options", "tiny", "--kind", "nope")
    assert code == 2 and "--kind nope: no such kind (kinds: generator, validator, benchmark, context-module, engineer, trainer, policy" in out
    code, out = plugins_cli("--kind", "trainer")  # the list, of one kind
    assert code == 0 and "trl" in out and "heuristic" not in out


# ------------------------------------------------------------- 6. writing-a-plugin.md says what the code does


def test_writing_a_plugin_states_what_the_code_does(registry):
    """Each statement the guide makes about these points, and the code it describes."""
    import dataclasses
    import inspect
    from pathlib import Path

    from envengineer.api import Benchmark, GenerationResult
    from envengineer.plugins.policies.tiny import TinyOptions
    from envengineer.plugins.policies.transformers_policy import TransformersOptions
    from envengineer.testing import assert_task_conforms, check_task

    guide = " ".join((Path(__file__).resolve().parents[1] / "docs" / "writing-a-plugin.md").read_text().split())

    # the tiny policy prompts in its own prompt_style, compact by default; the policy: section holds it
    assert TinyOptions.model_fields["prompt_style"].default == "compact" and TransformersOptions.model_fields["prompt_style"].default == "full"
    assert "own `prompt_style` option names, and that option defaults to `compact`" in guide
    assert "`policy: {name: tiny, prompt_style: full}`" in guide and "`prompt_style` lives in the run config's `policy:` section" in guide

    # generate's progress: None or a callable advanced by a count; GenerationResult: records and discarded counts
    generator, _ = registry.task("grid-walk")
    counted = []
    result = generator.generate(generator.default_config(), n=7, seed=0, progress=counted.append)
    assert isinstance(result, GenerationResult) and sum(counted) == len(result.records) == 7 and result.discarded == {}
    assert generator.generate(generator.default_config(), n=7, seed=0, progress=None).records == result.records  # None: nothing to call
    assert "`progress` is None or a callable to advance by a count: call `progress(k)`" in guide
    assert "`GenerationResult(records, discarded)`" in guide and [f.name for f in dataclasses.fields(GenerationResult)] == ["records", "discarded"]

    # assert_task_conforms's second argument: the task options
    assert list(inspect.signature(assert_task_conforms).parameters)[:2] == ["task", "options"]
    assert {"plugins", "n", "seed", "fuzz", "time_limit", "hash_seeds"} <= set(inspect.signature(check_task).parameters)
    assert "The second argument is the task options the checks build your task with, written as a run config's `task:` section minus `name`" in guide

    # Benchmark: description required, options the task options the set was drawn under
    required = [f.name for f in dataclasses.fields(Benchmark) if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    assert required == ["name", "task", "description", "path", "sha256"]
    assert "`Benchmark(name=, task=, description=, path=, sha256=, ...)` needs all five" in guide
    assert registry.benchmark("mapf-3agents").options == {"agents": 3} and "Its `options` are the task options the set was drawn under" in guide

    # ENVENGINEER_BLOCK_PLUGINS / ENVENGINEER_LOAD_PLUGINS: comma-separated lists
    blocked = create_plugin_manager(entry_points=False, environ={"ENVENGINEER_BLOCK_PLUGINS": "mapf_frozenlake, reasoning_gym, verifiers"})
    assert Registry(blocked).names("generator") == ["grid-walk"]
    assert "Both variables take comma-separated lists of names" in guide and "`ENVENGINEER_BLOCK_PLUGINS=name1,name2`" in guide


# ------------------------------------------------------------- 7. any task's prompt style names


def test_a_policy_takes_any_prompt_style_the_task_declares_and_refuses_others_naming_the_field(tmp_path):
    from typing import ClassVar

    from envengineer import hookimpl
    from envengineer.loop.runconfig import parse_run_config, resolve
    from typing import Literal

    from envengineer.tasks.gridwalk.generator import GridWalkGenerator, GridWalkOptions
    from envengineer.tasks.gridwalk.validator import GridWalkValidator

    class TerseOptions(GridWalkOptions):
        name: Literal["terse-walk"] = "terse-walk"

    class Terse(GridWalkGenerator):
        name: ClassVar[str] = "terse-walk"
        Options: ClassVar[type] = TerseOptions
        prompt_styles: ClassVar[tuple[str, ...]] = ("full", "compact", "terse")

    class TerseValidator(GridWalkValidator):
        name: ClassVar[str] = "terse-walk"

    class TersePlugin:
        @hookimpl
        def register_generators(self, register):
            register(Terse)

        @hookimpl
        def register_validators(self, register):
            register(TerseValidator)

        @hookimpl
        def register_benchmarks(self, register):
            from envengineer.api import Benchmark, read_checksums
            from envengineer.tasks.gridwalk.benchmarks import FOLDER

            path = FOLDER / "grid-walk-val.jsonl"
            register(Benchmark(name="terse-val", task="terse-walk", path=path, sha256=read_checksums(FOLDER)[path.name],
                               description="grid-walk's validation set under another task name"))

    pm = create_plugin_manager(entry_points=False, environ={})
    pm.register(TersePlugin(), name="terse")
    registry = Registry(pm)
    for policy in ({"name": "transformers", "path": str(tmp_path), "prompt_style": "terse"},
                   {"name": "tiny", "prompt_style": "terse"},
                   {"name": "openai-compatible", "model": "m", "prompt_style": "terse"}):
        config = parse_run_config({"name": "x", "task": {"name": "terse-walk"}, "policy": policy,
                                   "eval": {"validation": "terse-val"}}, "x.yaml", registry)
        assert resolve(config, registry, base_dir=tmp_path).policy.prompt_style == "terse"
        config = parse_run_config({"name": "x", "task": {"name": "grid-walk"}, "policy": policy}, "x.yaml", registry)
        with pytest.raises(ConfigError) as caught:
            resolve(config, registry, base_dir=tmp_path)
        assert str(caught.value) == (f"policy.{policy['name']}.prompt_style: task 'grid-walk' has no prompt style 'terse' "
                                     "(its styles: full, compact)")
