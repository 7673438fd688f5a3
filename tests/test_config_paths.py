"""Paths in a run config and in a suite manifest resolve relative to the file that names them, so a shipped
manifest runs from any folder (issue 34's defect: `envengineer suite /path/to/examples/sim-student` failed
outside the repository root); places (output, model folders) stay relative to the working directory."""

import os
import warnings
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from envengineer.cli.commands import app
from envengineer.registry import load_registry
from envengineer.loop.runconfig import load_run_config
from envengineer.plugins.suite.manifest import read_entries

REPO = Path(__file__).resolve().parent.parent
ENV = {"ENVENGINEER_LOAD_PLUGINS": "", "COLUMNS": "250"}


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def arms(entries):
    return {entry.arm: entry.config for entry in entries}


def test_a_shipped_manifest_runs_from_another_folder(tmp_path, monkeypatch, registry):
    monkeypatch.chdir(tmp_path)
    found = arms(read_entries([REPO / "examples" / "sim-student"], registry))
    assert Path(found["bad-env"].initial_config) == REPO / "examples" / "cpu-paper" / "bad-env.yaml"
    assert found["fixed"].initial_config is None
    result = CliRunner().invoke(app, ["suite", str(REPO / "examples" / "sim-student"), "--seeds", "3",
                                      "--output", str(tmp_path / "out"), "--dry-run"], env=ENV)
    assert result.exit_code == 0, result.output
    assert "to do" in result.output and not (tmp_path / "out").exists()


def test_from_the_repository_root_the_path_is_the_one_written_before(monkeypatch, registry):
    # a run's config is part of its identity: run from the root, a shipped arm names the same path as when paths
    # were read from the working directory, so finished runs stay finished
    monkeypatch.chdir(REPO)
    assert arms(read_entries(["examples/sim-student"], registry))["bad-env"].initial_config == "examples/cpu-paper/bad-env.yaml"
    assert arms(read_entries(["examples/frontier"], registry))["fixed-target"].initial_config == "examples/frontier/target-only.yaml"
    config = load_run_config("examples/quickstart-reasoning-gym.yaml", registry=registry)
    assert config.initial_config == "examples/quickstart-reasoning-gym-start.yaml"


def write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def grid_walk(**extra):
    return {"name": "paths", "task": {"name": "grid-walk"}, "engineer": {"name": "fixed"}, **extra}


def test_a_run_config_names_files_from_its_folder_and_the_command_line_from_the_working_directory(tmp_path, monkeypatch, registry):
    folder = tmp_path / "configs"
    config_file = write(folder / "run.yaml", grid_walk(initial_config="starts/start.yaml",
                                                        design={"prompt_file": "prompts/analysis.md"}, output="runs/x"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_run_config(config_file, registry=registry)
    assert Path(config.initial_config) == folder / "starts" / "start.yaml"
    assert Path(config.design.prompt_file) == folder / "prompts" / "analysis.md"
    assert config.output == "runs/x"  # a place: the working directory's
    config = load_run_config(config_file, ["initial_config=mine.yaml"], registry=registry)
    assert config.initial_config == "mine.yaml"
    # words are not paths
    assert load_run_config(write(folder / "u.yaml", grid_walk(initial_config="uniform")), registry=registry).initial_config == "uniform"


def test_a_path_found_only_from_the_working_directory_still_works_and_says_how_to_write_it(tmp_path, monkeypatch, registry):
    write(tmp_path / "start.yaml", {})
    config_file = write(tmp_path / "configs" / "run.yaml", grid_walk(initial_config="start.yaml"))
    monkeypatch.chdir(tmp_path)
    with pytest.warns(FutureWarning, match=r"initial_config: start.yaml is found from the working directory.*write \.\./start.yaml"):
        config = load_run_config(config_file, registry=registry)
    assert config.initial_config == "start.yaml"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write(tmp_path / "configs" / "start.yaml", {})  # now the file's own folder has it: no warning, that one wins
        assert load_run_config(config_file, registry=registry).initial_config == os.path.join("configs", "start.yaml")


def test_manifest_overrides_name_files_from_the_manifest_and_the_base_from_its_own_folder(tmp_path, monkeypatch, registry):
    base = write(tmp_path / "bases" / "base.yaml", grid_walk(initial_config="base-start.yaml"))
    write(tmp_path / "bases" / "base-start.yaml", {})  # the arms are checked as `envengineer run` checks them: the files exist
    write(tmp_path / "suites" / "arm-start.yaml", {})
    (tmp_path / "suites" / "notes").mkdir()
    (tmp_path / "suites" / "notes" / "summary.md").write_text((REPO / "plugins" / "prompts" / "summary.md").read_text())
    write(tmp_path / "suites" / "suite.yaml", {
        "base": os.path.relpath(base, tmp_path / "suites"),
        "arms": {"plain": None,
                 "own-start": {"initial_config": "arm-start.yaml"},
                 # a plugin option marked relative_to: config (the LLM engineer's summary prompt)
                 "llm": {"engineer": {"name": "openai-compatible", "model": "m", "base_url": "http://127.0.0.1:9/v1",
                                      "summary_prompt_file": "notes/summary.md"}}},
    })
    monkeypatch.chdir(tmp_path / "bases")
    found = arms(read_entries([tmp_path / "suites"], registry))
    assert found["plain"].initial_config == "base-start.yaml"  # the base's, from the base's folder (= here)
    assert Path(found["own-start"].initial_config) == tmp_path / "suites" / "arm-start.yaml"
    assert Path(found["llm"].engineer["summary_prompt_file"]) == tmp_path / "suites" / "notes" / "summary.md"
    assert found["llm"].initial_config == "base-start.yaml"
