"""The tiny policy knows no task: its vocabulary, embedding init and warm-start data come from the
task's Generator hooks (char-level by default), and ``pretrain`` comes from its plugin through
``register_commands``."""

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("transformers")

from envengineer.plugins.policies import tiny_model  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SMALL = {"hidden_size": 32, "layers": 1, "ffn": 64, "threads": 1}


@pytest.fixture
def arith_registry(monkeypatch):
    """The example third-party family (examples/envengineer-arith) registered at runtime."""
    from envengineer.plugin_manager import create_plugin_manager
    from envengineer.registry import Registry

    monkeypatch.syspath_prepend(str(REPO / "examples" / "envengineer-arith"))
    import envengineer_arith.plugin

    pm = create_plugin_manager(entry_points=False, environ={})
    pm.register(envengineer_arith.plugin, name="arith")
    return Registry(pm)


def test_the_tiny_policy_module_imports_no_task():
    import ast

    tree = ast.parse((REPO / "plugins" / "policies" / "tiny.py").read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert imported and not [m for m in imported if "tasks" in m or "mapf" in m]


def test_default_hooks_serve_any_family_with_a_reference_solver(arith_registry):
    generator, validator = arith_registry.task("arith")
    assert generator.tiny_vocabulary("compact") is None  # read characters
    pairs = generator.warm_start_pairs(n=6, seed=1, style="compact")
    records = generator.generate(generator.default_config(), n=6, seed=1).records
    assert pairs == [(generator.render(r, "compact"), generator.reference_answer(r)) for r in records]
    assert all(validator.score(r, a).valid for r, (_, a) in zip(records, pairs))
    chat = generator.warm_start_pairs(n=2, seed=1, style="full")  # chat messages: their contents
    assert chat[0][0] == generator.render(records[0], "full")[0]["content"]
    assert generator.reference_completion(records[0], "compact") == generator.reference_answer(records[0])


def test_a_family_without_a_reference_solver_is_told_what_to_implement(arith_registry, tmp_path):
    from envengineer.components import Generator
    from envengineer.errors import ConfigError

    generator, _ = arith_registry.task("arith")
    unsolved = type("Unsolved", (type(generator),), {"reference_answer": Generator.reference_answer})(generator.options)
    policy = arith_registry.create("policy", "tiny", {"instances": 4, "epochs": 1, "cache_dir": str(tmp_path), **SMALL})
    with pytest.raises(ConfigError, match="reference_answer"):
        policy.prepare(generator=unsolved)


def test_char_tokenizer_round_trips_text():
    tokenizer = tiny_model.build_tokenizer()
    text = "Compute 12 + 345.\n\t<answer>357</answer> ~|_"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text) and tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids) == text
    ids = tokenizer("12é</s>", add_special_tokens=False)["input_ids"]
    assert ids == ids[:2] + [tokenizer.unk_token_id, tokenizer.eos_token_id]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "12"
    with pytest.raises(ValueError, match="unique"):
        tiny_model.build_tokenizer(["a", "a"])


def test_mapf_offers_its_word_vocabulary_and_geometric_init(registry):
    import torch

    generator, validator = registry.task("mapf-frozenlake", {"agents": 2})
    words = generator.tiny_vocabulary("compact")
    assert generator.tiny_vocabulary("full") is None and len(words) == 127 and "0_0" in words and "N10" in words
    tokenizer = tiny_model.build_tokenizer(words)
    assert len(tokenizer) == 130  # the specials first, as before
    for record in generator.generate(generator.default_config(), n=8, seed=4).records:
        for text in (generator.render(record, "compact"), tiny_model.compact_reference(generator, record)):
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            assert tokenizer.unk_token_id not in ids and tokenizer.decode(ids) == text
            assert len(ids) == len(text.split())
        verdict = validator.score(record, generator.decode_response(record, tiny_model.compact_reference(generator, record), "compact"))
        assert verdict.valid and verdict.optimal
    pairs = generator.warm_start_pairs(n=16, seed=0, style="compact")
    assert len(pairs) == 16 and {p.split()[0] for p, _ in pairs} == {f"N{n}" for n in range(3, 11)}

    def init(style):
        model = tiny_model.build_model(tokenizer, hidden_size=64, layers=1, ffn=64, seed=0,
                                 init_embeddings=lambda w, ids: generator.tiny_init_embeddings(w, ids, style))
        return model.get_input_embeddings().weight.detach(), tokenizer.get_vocab()

    (geometric, vocab), (plain, _) = init("compact"), init("full")
    cos = torch.nn.functional.cosine_similarity
    near = cos(geometric[vocab["2_3"]], geometric[vocab["2_4"]], dim=0)
    far = cos(geometric[vocab["2_3"]], geometric[vocab["9_0"]], dim=0)
    assert near > far and near > 0.5
    assert torch.equal(geometric[vocab["H"]], plain[vocab["H"]])  # only cell and size rows change
    assert not torch.equal(geometric[vocab["2_3"]], plain[vocab["2_3"]])


def test_tiny_warm_starts_on_the_arith_family(arith_registry, registry, tmp_path):
    generator, validator = arith_registry.task("arith")
    policy = arith_registry.create("policy", "tiny", {"instances": 24, "epochs": 1, "max_new_tokens": 12,
                                                      "cache_dir": str(tmp_path), **SMALL})
    path = policy.prepare(generator=generator)
    info = json.loads((path / "warm_start.json").read_text())
    assert info["task"] == "arith" and info["tokenizer"] == "char" and info["instances"] == 24
    assert policy.warm_start_info() == info  # the last prepared task
    records = generator.generate(generator.default_config(), n=5, seed=9).records
    prompts = [generator.render(r, "compact") for r in records]
    texts = policy.with_path(path).sample(prompts, n=2)
    assert len(texts) == 5 and all(len(t) == 2 and all(isinstance(s, str) for s in t) for t in texts)
    [[alone]] = policy.sample(prompts[:1])  # without a path: the base model of the last prepared task
    assert isinstance(alone, str)
    for record, (text, _) in zip(records, texts):
        validator.score(record, generator.decode_response(record, text, "compact"))  # never raises
    # the cache is keyed by the task (and the style): the same options on mapf-frozenlake are another model
    mapf, _ = registry.task("mapf-frozenlake", {"agents": 2})
    assert policy.base_dir(mapf) != path and policy.base_dir(generator) == path
    other = type(policy)(policy.options.model_copy(update={"prompt_style": "full"}))
    assert other.base_dir(generator) != path


# ------------------------------------------------------------------- the command line


def test_pretrain_comes_from_the_policies_plugin():
    import typer

    from envengineer.cli.commands import app
    from envengineer.cli.state import CommandState
    from envengineer.plugin_manager import create_plugin_manager

    owners = {(info.name or info.callback.__name__): info.callback.__module__ for info in app.registered_commands}
    assert owners["pretrain"] == "envengineer.plugins.policies.cli"
    core = "".join(path.read_text() for path in (REPO / "core" / "cli").glob("*.py"))
    assert "def pretrain" not in core and "plugins.policies" not in core
    fresh = typer.Typer()
    create_plugin_manager(entry_points=False, environ={}).hook.register_commands(cli=fresh, state=CommandState())
    registered = {info.callback.__name__: info.callback.__module__ for info in fresh.registered_commands}
    assert registered == {"pretrain": "envengineer.plugins.policies.cli", "serve": "envengineer.plugins.serve",
                          "models": "envengineer.plugins.serve",
                          # the framework's own commands, built-in plugins since the core was made minimal
                          "report": "envengineer.plugins.report", "compare_command": "envengineer.plugins.report",
                          "suite_command": "envengineer.plugins.suite", "doctor": "envengineer.plugins.gpu",
                          "plan_command": "envengineer.plugins.gpu"}


def test_plugin_commands_are_added_and_clashes_or_failures_reported(monkeypatch, capsys):
    import typer

    from envengineer import hookimpl, plugin_manager

    from envengineer.cli import commands as cli

    class Good:
        @hookimpl
        def register_commands(self, cli):
            @cli.command("hello")
            def hello(name: str = typer.Option("world", "--name")) -> None:
                """Say hello."""
                print(f"hello {name}")

    class Clash:
        @hookimpl
        def register_commands(self, cli):
            cli.command("run")(lambda: None)

    class Broken:
        @hookimpl
        def register_commands(self, cli):
            cli.command("half")(lambda: None)
            raise RuntimeError("boom")

    create = plugin_manager.create_plugin_manager

    def manager(**_):
        pm = create(builtins=(), entry_points=False, environ={})
        for name, plugin in (("good", Good()), ("clash", Clash()), ("broken", Broken())):
            pm.register(plugin, name=name)
        return pm

    app = typer.Typer()
    app.command("run")(lambda: print("core run"))
    monkeypatch.setattr(cli, "app", app)
    monkeypatch.setattr(plugin_manager, "create_plugin_manager", manager)
    cli._plugin_commands()
    assert sorted(info.name for info in app.registered_commands) == ["hello", "run"]
    err = capsys.readouterr().err
    assert "clash" in err and "'run' already exists" in err and "broken" in err and "boom" in err
    result = CliRunner().invoke(app, ["hello", "--name", "arith"])
    assert result.exit_code == 0 and "hello arith" in result.output
    assert "core run" in CliRunner().invoke(app, ["run"]).output


def test_pretrain_command_builds_caches_and_measures(tmp_path, monkeypatch):
    """Without --task, pretrain builds the base of the one installed task family."""
    import envengineer.registry
    from envengineer.cli.commands import app
    from envengineer.plugin_manager import create_plugin_manager
    from envengineer.registry import Registry

    only_mapf = Registry(create_plugin_manager(entry_points=False, environ={}, block=("reasoning_gym", "gridwalk", "verifiers")))
    monkeypatch.setattr(envengineer.registry, "load_registry", lambda *a, **k: only_mapf)
    monkeypatch.setenv("ENVENGINEER_CACHE", str(tmp_path))
    args = ["pretrain", "--instances", "40", "--epochs", "1", "--threads", "1", "--limit", "8"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())  # rich wraps the table's title
    assert "base model (built in" in output and "greedy decoding on mapf-2agents-val (8)" in output
    assert "3x3" in output and "optimal:" in output
    [built] = list((tmp_path / "tiny").iterdir())
    assert json.loads((built / "warm_start.json").read_text())["task"] == "mapf-frozenlake"
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "base model (cached)" in " ".join(again.output.split())


def test_pretrain_command_on_another_family(tmp_path, monkeypatch, arith_registry):
    import envengineer.registry
    from envengineer.cli.commands import app

    monkeypatch.setenv("ENVENGINEER_CACHE", str(tmp_path))
    monkeypatch.setattr(envengineer.registry, "load_registry", lambda *a, **k: arith_registry)
    args = ["pretrain", "--task", "arith", "--instances", "24", "--epochs", "1", "--threads", "1", "--limit", "6"]
    refused = CliRunner().invoke(app, args)  # arith declares only the full style; the tiny policy's default is compact
    assert refused.exit_code == 1 and "task 'arith' has no prompt style 'compact' (its styles: full)" in " ".join(str(refused.exception).split())
    result = CliRunner().invoke(app, [*args, "--style", "full"])
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert "greedy decoding on arith-val (6)" in output and "1d" in output  # the task's declared validation set
    assert "envengineer_arith" in sys.modules
