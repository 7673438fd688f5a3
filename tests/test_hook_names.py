"""A misnamed hook (``register_generator`` for ``register_generators``) in a plugin: named once, with the
plugin, the wrong name and the closest hook; the plugin is left out and everything else keeps working.
Both ways in: an installed distribution (entry point) and the conformance kit's ``plugins=[...]``."""

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from envengineer.errors import RegistrationError
from envengineer.plugin_manager import HookNameError, create_plugin_manager
from envengineer.registry import Registry

REPO = Path(__file__).resolve().parents[1]

#: a task family whose generator hook has a typo; its validator hook is right
TYPO_TASK = """
from envengineer import hookimpl
from envengineer.tasks.gridwalk.generator import GridWalkGenerator
from envengineer.tasks.gridwalk.validator import GridWalkValidator

class TypoGenerator(GridWalkGenerator):
    name = "{task}"

class TypoValidator(GridWalkValidator):
    name = "{task}"

@hookimpl
def register_generator(register):
    register(TypoGenerator)

@hookimpl
def register_validators(register):
    register(TypoValidator)
"""

GOOD_ENGINEER = """
from envengineer import hookimpl
from envengineer.components import Engineer

class Good(Engineer):
    name = "{name}"
    def propose(self, request):
        return None

@hookimpl
def register_engineers(register):
    register(Good)
"""


def _distribution(root: Path, dist: str, entry: str, module: str, source: str) -> None:
    """An installed distribution (dist-info with an ``envengineer`` entry point, and its module), as importlib.metadata reads it."""
    info = root / f"{dist}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[envengineer]\n{entry} = {module}\n")
    (root / f"{module}.py").write_text(textwrap.dedent(source))


def _module(root: Path, module: str, source: str) -> None:
    (root / f"{module}.py").write_text(textwrap.dedent(source))


# ------------------------------------------------------------------ installed (entry point)


def test_an_installed_plugin_with_a_typo_is_left_out_and_named(tmp_path, monkeypatch, caplog):
    _distribution(tmp_path, "typo-dist", "typo_ep", "typo_ep_mod", TYPO_TASK.format(task="typo-ep-task"))
    _distribution(tmp_path, "good-dist", "good_ep", "good_ep_mod", GOOD_ENGINEER.format(name="good-ep"))
    monkeypatch.syspath_prepend(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="envengineer.plugin_manager"):
        pm = create_plugin_manager(environ={})  # before: RegistrationError, and every command failed
        create_plugin_manager(environ={})  # a second manager in the same process (the CLI builds two)
    [(who, error)] = pm.load_report.failed
    assert who == "typo_ep (from distribution typo-dist)"
    assert error == "register_generator is marked @hookimpl but no hook is named 'register_generator': did you mean register_generators?"
    # logged once, however many managers were built
    logged = [r.getMessage() for r in caplog.records if "typo_ep" in r.getMessage()]
    assert logged == [f"could not load plugin {who}: {error}"]
    # isolated: none of its hooks (not even its correct validator hook) is registered; the others are
    assert pm.get_plugin("typo_ep") is None
    registry = Registry(pm)
    assert "typo-ep-task" not in registry.names("validator")
    assert registry.entry("engineer", "good-ep").origin.startswith("good-dist")
    assert "mapf-frozenlake" in registry.names("generator")


def test_a_plugin_pluggy_refuses_half_way_leaves_nothing_behind(tmp_path, monkeypatch):
    """pluggy adds a plugin's hooks one by one and refuses a bad argument name on the way: the hooks added before stay
    unless the plugin is unregistered."""
    _distribution(tmp_path, "half-dist", "half_ep", "half_ep_mod", GOOD_ENGINEER.format(name="half-ep") + textwrap.dedent("""
        @hookimpl
        def register_validators(registr):
            pass
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    pm = create_plugin_manager(environ={})
    [(who, error)] = pm.load_report.failed
    assert who.startswith("half_ep") and "registr" in error
    assert pm.get_plugin("half_ep") is None and "half-ep" not in Registry(pm).names("engineer")


def test_the_command_line_keeps_working_and_prints_the_error_once(tmp_path):
    _distribution(tmp_path, "typo-dist", "typo_cli", "typo_cli_mod", TYPO_TASK.format(task="typo-cli-task"))
    _distribution(tmp_path, "boom-dist", "boom_cli", "boom_cli_mod", "raise RuntimeError('boom at import')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    env.pop("ENVENGINEER_LOAD_PLUGINS", None)
    env["COLUMNS"] = "400"  # no wrapped lines
    message = "register_generator is marked @hookimpl but no hook is named 'register_generator': did you mean register_generators?"
    listing = subprocess.run([sys.executable, "-m", "envengineer.cli.commands", "plugins"], capture_output=True, text=True, env=env, timeout=300,
                             cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    output = listing.stdout + listing.stderr
    assert output.count(message) == 1 and output.count("typo_cli (from distribution typo-dist)") == 2  # the error, then the listing's line
    assert output.count("RuntimeError: boom at import") == 1  # before: twice (a manager at import, one for the command), then the listing
    assert "mapf-frozenlake" in listing.stdout
    out = tmp_path / "walks.jsonl"
    generate = subprocess.run([sys.executable, "-m", "envengineer.cli.commands", "generate", "grid-walk", "--n", "2", "--output", str(out)],
                              capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert generate.returncode == 0, generate.stderr
    assert (generate.stdout + generate.stderr).count(message) == 1 and len(out.read_text().splitlines()) == 2
    assert (generate.stdout + generate.stderr).count("RuntimeError: boom at import") == 1


# ------------------------------------------------------------------ the conformance kit


def test_the_kit_names_the_typo_instead_of_an_unknown_generator(tmp_path, monkeypatch):
    from envengineer.testing import assert_task_conforms, load_task

    _module(tmp_path, "kit_typo_mod", TYPO_TASK.format(task="kit-typo-task"))
    monkeypatch.syspath_prepend(str(tmp_path))
    pattern = ("plugin module 'kit_typo_mod': register_generator is marked @hookimpl but no hook is named 'register_generator': "
               "did you mean register_generators\\?")
    with pytest.raises(RegistrationError, match=pattern):  # before: "unknown generator 'kit-typo-task'"
        load_task("kit-typo-task", plugins=["kit_typo_mod"])
    with pytest.raises(RegistrationError, match=pattern):
        assert_task_conforms("kit-typo-task", plugins=["kit_typo_mod"])


def test_the_kit_names_an_installed_plugin_that_failed_when_the_task_is_unknown(tmp_path, monkeypatch):
    from envengineer.testing import load_task

    _distribution(tmp_path, "typo-dist", "typo_kit_ep", "typo_kit_ep_mod", TYPO_TASK.format(task="kit-ep-task"))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RegistrationError, match="(?s)unknown generator 'kit-ep-task'.*typo_kit_ep .*did you mean register_generators"):
        load_task("kit-ep-task")


def test_a_hook_function_without_hookimpl_is_named(tmp_path, monkeypatch):
    from envengineer.testing import load_task

    _module(tmp_path, "kit_unmarked_mod", TYPO_TASK.format(task="kit-unmarked-task").replace(
        "@hookimpl\ndef register_generator(", "def register_generators("))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RegistrationError, match="kit_unmarked_mod.*register_generators is not marked @hookimpl"):
        load_task("kit-unmarked-task", plugins=["kit_unmarked_mod"])


# ------------------------------------------------------------------ the check itself


def test_what_is_and_is_not_a_hook_name_problem(pm, tmp_path, monkeypatch):
    _module(tmp_path, "names_mod", """
        from envengineer import hookimpl

        @hookimpl
        def register_engineers(register):
            pass

        def register_engineer_class(cls):  # a helper beside the hook it serves
            return cls

        def register_everything(register):  # not close to any hook
            pass

        def on_run_ends(run_dir, metrics):  # a typo, and not marked
            pass

        @hookimpl
        def setup(register):  # marked, nothing close
            pass

        @hookimpl(optionalhook=True)
        def register_something_later(register):  # a hook someone may specify later
            pass
        """)
    monkeypatch.syspath_prepend(str(tmp_path))
    import names_mod

    problems = pm.hook_problems(names_mod)
    assert len(problems) == 2, problems
    assert problems[0].startswith("setup is marked @hookimpl but no hook is named 'setup' (the hooks: doctor_checks, on_benchmark_end, ")
    assert problems[1] == ("on_run_ends looks like hook 'on_run_end' but is neither marked @hookimpl nor named like it: "
                           "did you mean on_run_end?")
    with pytest.raises(HookNameError) as info:
        pm.register(names_mod, name="names")
    assert info.value.plugin == "names" and str(info.value).startswith("plugin 'names': setup is marked")
    assert pm.get_plugin("names") is None


def test_every_built_in_and_the_example_plugin_pass_the_check(pm, monkeypatch):
    import importlib

    from envengineer.plugin_manager import BUILTIN_PLUGINS

    monkeypatch.syspath_prepend(str(REPO / "examples" / "envengineer-arith"))
    for name in (*BUILTIN_PLUGINS, "envengineer_arith.plugin"):
        assert pm.hook_problems(importlib.import_module(name)) == [], name
