"""The plugin core: factory, registration, owners, broken and blocked plugins, light imports."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from envengineer import hookimpl
from envengineer.components import Engineer
from envengineer.errors import RegistrationError, UnknownComponentError
from envengineer.plugin_manager import create_plugin_manager
from envengineer.registry import Registry

REPO = Path(__file__).resolve().parents[1]


class EchoEngineer(Engineer):
    name = "echo"
    description = "returns the context"

    def propose(self, request):
        return request


class EchoPlugin:
    @hookimpl
    def register_engineers(self, register):
        register(EchoEngineer)


def test_builtins_register_the_testbed(registry):
    assert "mapf-frozenlake" in registry.names("generator")
    assert "mapf-frozenlake" in registry.names("validator")
    assert {"mapf-2agents-val", "mapf-2agents-test", "mapf-3agents", "mapf-4agents", "mapf-5agents"} <= set(registry.names("benchmark"))
    entry = registry.entry("generator", "mapf-frozenlake")
    assert entry.origin == "builtin"


def test_runtime_plugin_registers_a_component(pm):
    pm.register(EchoPlugin(), name="echo-plugin")
    registry = Registry(pm)
    entry = registry.entry("engineer", "echo")
    assert entry.owner == "echo-plugin"
    assert registry.create("engineer", "echo").propose("x") == "x"


def test_duplicate_registration_names_both_owners(pm):
    class Other:
        @hookimpl
        def register_engineers(self, register):
            register(EchoEngineer)

    pm.register(EchoPlugin(), name="first-plugin")
    pm.register(Other(), name="second-plugin")
    with pytest.raises(RegistrationError) as info:
        Registry(pm)
    assert "first-plugin" in str(info.value) and "second-plugin" in str(info.value)


def test_wrong_type_is_rejected_with_the_rule(pm):
    class Bad:
        @hookimpl
        def register_engineers(self, register):
            register(object)

    pm.register(Bad(), name="bad-plugin")
    with pytest.raises(RegistrationError, match="subclasses of Engineer"):
        Registry(pm)


def test_unknown_component_lists_known_names(registry):
    with pytest.raises(UnknownComponentError, match="mapf-frozenlake"):
        registry.get("generator", "no-such-task")


def test_options_errors_name_the_field(registry):
    from envengineer.errors import ConfigError

    with pytest.raises(ConfigError, match=r"task\.agents"):
        registry.task("mapf-frozenlake", {"agents": "many"})
    with pytest.raises(ConfigError, match=r"task\.agentz"):
        registry.task("mapf-frozenlake", {"agentz": 2})


def test_block_builtin_by_name():
    pm = create_plugin_manager(entry_points=False, block=["mapf_frozenlake"], environ={})
    assert "mapf-frozenlake" not in Registry(pm).names("generator")
    pm = create_plugin_manager(entry_points=False, environ={"ENVENGINEER_BLOCK_PLUGINS": "envengineer.tasks.mapf_frozenlake.plugin"})
    assert "mapf-frozenlake" not in Registry(pm).names("generator")
    pm = create_plugin_manager(entry_points=False, block=["mapf_frozenlake", "reasoning_gym"], environ={})
    assert Registry(pm).names("generator") == ["grid-walk", "verifiers"]
    pm = create_plugin_manager(entry_points=False, block=["mapf_frozenlake", "reasoning_gym", "gridwalk", "verifiers"], environ={})
    assert Registry(pm).names("generator") == []


def _fake_distribution(root: Path, dist: str, entry: str, module: str, source: str) -> None:
    """A real installed-distribution layout (dist-info + module) that importlib.metadata reads."""
    info = root / f"{dist}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[envengineer]\n{entry} = {module}\n")
    (root / f"{module}.py").write_text(textwrap.dedent(source))


def test_broken_entry_point_is_reported_and_others_load(tmp_path, monkeypatch):
    _fake_distribution(tmp_path, "broken-dist", "broken", "broken_mod", "raise RuntimeError('boom')\n")
    _fake_distribution(
        tmp_path, "good-dist", "good", "good_mod",
        """
        from envengineer import hookimpl
        from envengineer.components import Engineer

        class Good(Engineer):
            name = "good"
            def propose(self, request):
                return None

        @hookimpl
        def register_engineers(register):
            register(Good)
        """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    pm = create_plugin_manager(environ={})
    failed = dict(pm.load_report.failed)
    assert any("broken" in who and "broken-dist" in who for who in failed)
    assert "boom" in next(iter(failed.values()))
    registry = Registry(pm)
    assert registry.entry("engineer", "good").origin.startswith("good-dist")
    # the allow-list loads fewer
    pm = create_plugin_manager(environ={"ENVENGINEER_LOAD_PLUGINS": ""})
    assert "good" not in Registry(pm).names("engineer")
    pm = create_plugin_manager(environ={"ENVENGINEER_LOAD_PLUGINS": "good"})
    assert "good" in Registry(pm).names("engineer") and not pm.load_report.failed


def test_misspelled_hook_fails_loudly(tmp_path, monkeypatch):
    _fake_distribution(
        tmp_path, "typo-dist", "typo", "typo_mod",
        """
        from envengineer import hookimpl

        @hookimpl
        def register_enginers(register):
            pass
        """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    pm = create_plugin_manager(environ={})  # the plugin is left out, named with the closest hook (tests/test_hook_names.py)
    [(who, error)] = pm.load_report.failed
    assert who.startswith("typo") and "register_enginers" in error and "did you mean register_engineers?" in error


HEAVY = ("torch", "transformers", "trl", "verl", "vllm", "openai", "google.genai", "datasets", "wandb", "mlflow", "tensorboard", "ray", "submitit")


def test_import_and_help_stay_light():
    code = textwrap.dedent(
        f"""
        import sys
        import envengineer
        from envengineer.registry import load_registry
        from envengineer.cli.commands import app
        from typer.testing import CliRunner
        result = CliRunner().invoke(app, ["--help"])
        assert result.exit_code == 0, result.output
        load_registry()
        heavy = [m for m in {HEAVY!r} if m in sys.modules]
        print("HEAVY", heavy)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY []" in out.stdout, out.stdout + out.stderr


def test_example_package_is_discovered_through_metadata(tmp_path):
    """Install the example extension package for real, then find it through its entry point."""
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(REPO / "examples" / "envengineer-arith")],
        check=True, capture_output=True,
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    code = (
        "from envengineer.registry import load_registry\n"
        "r = load_registry()\n"
        "e = r.entry('generator', 'arith')\n"
        "print(e.owner, e.origin)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split()[:2] == ["arith", "envengineer-arith"], out.stdout
