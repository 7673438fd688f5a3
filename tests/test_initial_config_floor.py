"""A config file is refused where a declared knob lies outside the bounds the design step's
projection keeps it in: otherwise round 0 trains on it as written and the projection moves it
from round 1 on (MAPF: a size's ratio below the 2% floor)."""

from pathlib import Path
from typing import ClassVar

import pytest
import yaml
from pydantic import BaseModel, ConfigDict, Field

from envengineer.components import GenerationResult, Generator, Knob
from envengineer.design.context import choose_start
from envengineer.errors import ConfigError
from envengineer.registry import load_registry
from envengineer.store.configs import knobs_out_of_bounds, load_generator_config
from envengineer.tasks.mapf_frozenlake.knobs import uniform_config
from envengineer.tasks.mapf_frozenlake.projection import project
from envengineer.tasks.mapf_frozenlake.shares import RATIO_FLOOR

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mapf():
    return load_registry(entry_points=False).create("generator", "mapf-frozenlake", {})


def _mapf_file(tmp_path, ratios):
    data = uniform_config().model_dump()
    for name, ratio in ratios.items():
        data["sizes"][name]["ratio"] = ratio
    path = tmp_path / "start.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_declared_floor_is_the_projections(mapf):
    assert mapf.knob("ratio").low == RATIO_FLOOR == 0.02
    raised = project({"sizes": {"3x3": {"ratio": 0.0}}}, uniform_config())
    assert raised.config.knobs(3).ratio == RATIO_FLOOR


def test_a_ratio_below_the_floor_is_refused_naming_the_file_and_field(mapf, tmp_path):
    path = _mapf_file(tmp_path, {"3x3": 0.0, "10x10": 0.25})
    with pytest.raises(ConfigError) as info:
        load_generator_config(mapf, path)
    text = str(info.value)
    assert str(path) in text
    assert "sizes.3x3.ratio: 0.0 is below the projection's floor 0.02" in text
    assert "10x10" not in text
    # the run is refused when its config is resolved, before anything is written
    with pytest.raises(ConfigError, match=r"sizes\.3x3\.ratio: 0\.0 is below"):
        choose_start("V4", str(path), mapf)


def test_a_ratio_at_the_floor_is_accepted_and_the_projection_keeps_it(mapf, tmp_path):
    path = _mapf_file(tmp_path, {"3x3": 0.02, "10x10": 0.23})
    config = load_generator_config(mapf, path)
    assert config.knobs(3).ratio == 0.02
    assert project({}, config).config == config


def test_the_shipped_probe_config_loads_and_stays_as_written(mapf):
    path = REPO / "examples" / "cpu-paper" / "bad-env.yaml"
    config = load_generator_config(mapf, path)
    kept = project({}, config)
    assert kept.config == config and not kept.changes


@pytest.mark.parametrize("agents", [1, 2, 3, 5])
def test_the_uniform_and_random_configs_are_within_bounds(agents):
    generator = load_registry(entry_points=False).create("generator", "mapf-frozenlake", {"agents": agents})
    assert knobs_out_of_bounds(generator, generator.default_config()) == []
    for seed in range(20):
        assert knobs_out_of_bounds(generator, generator.random_config(seed)) == [], seed


# ------------------------------------------------------------- any task


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ratio: float = Field(0.5, ge=0, le=1)
    level: int = Field(2, ge=0, le=100)  # the schema is looser than the declared knob


class TableConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    groups: dict[str, Row] = Field(default_factory=lambda: {"a": Row(), "b": Row()})


class TableGenerator(Generator):
    name: ClassVar[str] = "bounded-table"
    config_model: ClassVar[type[BaseModel]] = TableConfig
    knob_table: ClassVar[str | None] = "groups"
    knobs: ClassVar[tuple[Knob, ...]] = (
        Knob("ratio", 0.1, 1.0, 0.01, share=True),
        Knob("level", 0, 10, 1, integer=True, harder="up"),
    )

    def generate(self, config, *, n, seed, workers=1, progress=None):
        return GenerationResult([{"id": str(i)} for i in range(n)])

    def render(self, record, style="full"):
        return "?"


class FlatConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    noise: float = Field(0.1, ge=0, le=5)


class FlatGenerator(TableGenerator):
    name: ClassVar[str] = "bounded-flat"
    config_model: ClassVar[type[BaseModel]] = FlatConfig
    knob_table: ClassVar[str | None] = None
    knobs: ClassVar[tuple[Knob, ...]] = (Knob("noise", 0.0, 1.0, 0.05, harder="up"),)


def _write(tmp_path, data):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_generic_task_refuses_a_knob_out_of_its_declared_bounds(tmp_path):
    generator = TableGenerator()
    path = _write(tmp_path, {"groups": {"a": {"ratio": 0.5, "level": 12}, "b": {"ratio": 0.5, "level": 3}}})
    with pytest.raises(ConfigError, match=r"groups\.a\.level: 12 is above the projection's ceiling 10") as info:
        load_generator_config(generator, path)
    assert str(path) in str(info.value) and "groups.b" not in str(info.value)
    assert generator.project({"groups": {"a": {"level": 12}}}, generator.default_config()).config.groups["a"].level == 10
    path = _write(tmp_path, {"groups": {"a": {"ratio": 0.95, "level": 1}, "b": {"ratio": 0.05, "level": 1}}})
    with pytest.raises(ConfigError, match=r"groups\.b\.ratio: 0\.05 is below the projection's floor 0\.1"):
        load_generator_config(generator, path)
    path = _write(tmp_path, {"groups": {"a": {"ratio": 0.9, "level": 10}, "b": {"ratio": 0.1, "level": 0}}})
    config = load_generator_config(generator, path)  # at the bounds: accepted, and the projection keeps it
    assert generator.project({}, config).config == config


def test_a_task_without_a_knob_table_checks_its_top_level_knobs(tmp_path):
    generator = FlatGenerator()
    with pytest.raises(ConfigError, match=r"noise: 2\.5 is above the projection's ceiling 1"):
        load_generator_config(generator, _write(tmp_path, {"noise": 2.5}))
    assert load_generator_config(generator, _write(tmp_path, {"noise": 1.0})).noise == 1.0
