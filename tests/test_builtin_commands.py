"""The framework's own commands come from built-in plugins (docs/architecture.md): blocked, a command is gone
and the loop still runs; loaded, --help lists every command where it always stood."""

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def envengineer(args, tmp_path, **env):
    environ = {**os.environ, "ENVENGINEER_LOAD_PLUGINS": "", "COLUMNS": "200", "ENVENGINEER_CACHE": str(tmp_path / "cache"), **env}
    return subprocess.run([sys.executable, "-m", "envengineer.cli.commands", *args], capture_output=True, text=True,
                          env=environ, cwd=REPO, timeout=300)


def commands(help_text):
    return re.findall(r"^│ (\w[\w-]*) ", help_text, re.M)


def test_help_lists_the_builtin_plugins_commands_in_their_places(tmp_path):
    """The core's commands (HELP_ORDER) with the command plugins' where their register_commands place them."""
    listed = commands(envengineer(["--help"], tmp_path).stdout)
    assert listed == ["generate", "solve", "score", "plugins", "context", "propose", "run", "doctor", "plan", "eval", "report",
                      "compare", "suite", "serve", "models", "pretrain", "bench", "engineers"], listed


def test_help_order_puts_each_placed_command_after_the_one_it_follows():
    from envengineer.cli.commands import help_order

    placed = {"plan": "doctor", "doctor": "run", "suite": "compare", "lost": "gone"}
    assert help_order(("generate", "run", "eval"), placed) == ["generate", "run", "doctor", "plan", "eval"]


def test_a_blocked_command_plugin_takes_only_its_commands_away(tmp_path):
    out = envengineer(["--help"], tmp_path, ENVENGINEER_BLOCK_PLUGINS="gpu,suite,engineer_bench").stdout
    listed = commands(out)
    assert not {"doctor", "plan", "suite", "engineers"} & set(listed), listed
    assert {"run", "eval", "report", "compare", "generate"} <= set(listed)
    # the loop runs without them; --dry-run says there is no memory plan
    run = envengineer(["run", "examples/sim-student/base.yaml", "--dry-run", "--output", str(tmp_path / "run")], tmp_path,
                      ENVENGINEER_BLOCK_PLUGINS="gpu")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "memory plan: none: the gpu plugin (envengineer.plugins.gpu) is not loaded" in " ".join(run.stdout.split())
    loaded = envengineer(["run", "examples/sim-student/base.yaml", "--dry-run", "--output", str(tmp_path / "run")], tmp_path)
    assert loaded.returncode == 0 and "memory plan" in loaded.stdout and "not loaded" not in loaded.stdout


def test_the_command_plugins_register_functions_after_their_submodules_are_imported():
    """A command function named like a submodule of its package (``compare``) would be replaced by the submodule
    once anything imports it: every callback the built-in command plugins register is still a function."""
    import importlib
    import inspect
    import pkgutil

    import typer

    from envengineer.cli.state import CommandState
    from envengineer.plugins import engineer_bench, gpu, report, suite

    for package in (report, suite, gpu, engineer_bench):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(info.name)
        fresh = typer.Typer()
        package.register_commands(cli=fresh, state=CommandState())
        callbacks = [c.callback for c in fresh.registered_commands] + [
            c.callback for g in fresh.registered_groups for c in g.typer_instance.registered_commands]
        assert callbacks and all(inspect.isfunction(c) for c in callbacks), (package.__name__, callbacks)


def test_a_plugins_command_gets_the_registry_from_the_state_built_once_per_invocation(monkeypatch):
    """register_commands(cli, state): the command reads state.registry, built on first use, once per invocation."""
    import typer
    from typer.testing import CliRunner

    import envengineer.registry
    from envengineer import hookimpl, plugin_manager
    from envengineer.cli import commands as cli

    built = []

    def load_registry(*args, **kwargs):
        built.append(object())
        return built[-1]

    class Asks:
        @hookimpl
        def register_commands(self, cli, state):
            @cli.command("ask")
            def ask() -> None:
                assert state.registry is state.registry  # one registry for the invocation
                print(f"registry {built.index(state.registry)}")

            return {"ask": "run"}

    def manager(**_):
        pm = create(builtins=(), entry_points=False, environ={})
        pm.register(Asks(), name="asks")
        return pm

    create = plugin_manager.create_plugin_manager
    app = typer.Typer()
    app.callback()(cli._invocation)
    app.command("run")(lambda: None)
    app.command("eval")(lambda: None)
    monkeypatch.setattr(cli, "app", app)
    monkeypatch.setattr(plugin_manager, "create_plugin_manager", manager)
    monkeypatch.setattr(envengineer.registry, "load_registry", load_registry)
    cli._plugin_commands()
    assert [info.name for info in app.registered_commands] == ["run", "ask", "eval"]  # placed after run
    assert not built  # nothing is built until a command asks
    assert CliRunner().invoke(app, ["ask"]).output == "registry 0\n"
    assert CliRunner().invoke(app, ["ask"]).output == "registry 1\n"  # a fresh one for the next invocation
