"""What an outside plugin author hits: the core assumes no task family (MAPF-FrozenLake or any
other), and its names, help texts and docs say what they do for any task."""

import pytest
from typer.testing import CliRunner

from envengineer.errors import ConfigError
from envengineer.plugin_manager import create_plugin_manager
from envengineer.registry import Registry

FAMILIES = "grid-walk, mapf-frozenlake, reasoning-gym"


@pytest.fixture
def one_family():
    """A registry in which grid-walk is the only task family installed."""
    return Registry(create_plugin_manager(entry_points=False, environ={}, block=("mapf_frozenlake", "reasoning_gym")))


# ------------------------------------------------------------- 1. the task is named, never assumed


def test_a_run_config_without_a_task_names_the_field_and_the_installed_families(registry):
    from envengineer.runconfig import RunConfig, parse_run_config

    assert RunConfig.model_fields["task"].is_required()
    for data, field in (({"name": "x"}, "task"), ({"name": "x", "task": None}, "task"), ({"name": "x", "task": {"agents": 2}}, "task.name")):
        with pytest.raises(ConfigError) as caught:
            parse_run_config(data, "x.yaml", registry)
        assert str(caught.value) == f"x.yaml: {field}: required when more than one task family is installed; name one of: {FAMILIES}"


def test_a_run_config_without_a_task_runs_the_only_installed_family(one_family):
    from envengineer.runconfig import parse_run_config

    assert one_family.names("generator") == ["grid-walk"]
    assert parse_run_config({"name": "x"}, registry=one_family).task == {"name": "grid-walk"}
    assert parse_run_config({"name": "x", "task": {"prompt_style": "compact"}}, registry=one_family).task == {"name": "grid-walk", "prompt_style": "compact"}
    assert parse_run_config({"name": "x", "task": "mapf-frozenlake"}, registry=one_family).task == {"name": "mapf-frozenlake"}  # named: as given
    empty = Registry(create_plugin_manager(builtins=(), entry_points=False, environ={}))
    with pytest.raises(ConfigError, match="task: required, and no task family is installed"):
        parse_run_config({"name": "x"}, registry=empty)


def test_envengineer_run_without_a_task_stops_before_writing(tmp_path, capsys):
    from envengineer.cli import main

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
    from envengineer.cli import app

    monkeypatch.setattr(envengineer.registry, "load_registry", lambda *a, **k: Registry(create_plugin_manager(entry_points=False, environ={})))
    result = CliRunner().invoke(app, ["pretrain", "--limit", "1"])
    assert isinstance(result.exception, ConfigError)
    assert str(result.exception) == f"--task: required when more than one task family is installed; name one of: {FAMILIES}"
