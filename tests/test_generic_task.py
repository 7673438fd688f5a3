"""The core knows nothing about MAPF: a toy task registered at runtime goes through every generic path."""

import json
import random
from typing import ClassVar

from pydantic import BaseModel, ConfigDict
from typer.testing import CliRunner

from envengineer import hookimpl
from envengineer.components import Change, GenerationResult, Generator, Projection, Validator, Verdict
from envengineer.registry import Registry
from envengineer.loop.taskops import generate_file, score_file, solve_file


class ToyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_value: int = 9


class ToyGenerator(Generator):
    """Echo a number back."""

    name: ClassVar[str] = "toy-echo"
    config_model: ClassVar[type[BaseModel]] = ToyConfig

    def default_config(self):
        return ToyConfig()

    def random_config(self, seed):
        return ToyConfig(max_value=random.Random(seed).randint(1, 99))

    def generate(self, config, *, n, seed, workers=None, progress=None):
        rng = random.Random(seed)
        records = []
        for i in range(n):
            value = rng.randint(0, config.max_value)
            records.append({"id": f"toy-{seed}-{i}", "value": value, "group": "small" if value < 5 else "large"})
        return GenerationResult(records)

    def project(self, proposal, current):
        value = proposal.get("max_value") if isinstance(proposal, dict) else None
        if isinstance(value, int) and not isinstance(value, bool):
            clipped = max(1, min(99, value))
            changes = () if clipped == value else (Change("max_value", value, clipped, "clipped"),)
            return Projection(ToyConfig(max_value=clipped), changes)
        return Projection(current, (Change("max_value", value, current.max_value, "not an integer"),))

    def render(self, record, style="full"):
        text = f"Say {record['value']}"
        return text if style == "compact" else [{"role": "user", "content": text}]

    def group(self, record):
        return record["group"]

    def groups(self):
        return ("small", "large")

    def reference_answer(self, record):
        return str(record["value"])


class ToyValidator(Validator):
    name: ClassVar[str] = "toy-echo"
    failure_types: ClassVar[tuple[str, ...]] = ("wrong",)

    def score(self, record, response):
        ok = response.strip() == str(record["value"])
        return Verdict(ok, ok, None if ok else "wrong", () if ok else ("wrong",), 0 if ok else None)


class ToyPlugin:
    @hookimpl
    def register_generators(self, register):
        register(ToyGenerator)

    @hookimpl
    def register_validators(self, register):
        register(ToyValidator)


def _registry(pm):
    pm.register(ToyPlugin(), name="toy")
    return Registry(pm)


def test_generate_solve_score_project_render(pm, tmp_path):
    registry = _registry(pm)
    generator, validator = registry.task("toy-echo")
    instances = tmp_path / "i.jsonl"
    generate_file(generator, generator.default_config(), n=50, seed=3, output=instances)
    again = tmp_path / "j.jsonl"
    generate_file(generator, generator.default_config(), n=50, seed=3, output=again)
    assert instances.read_bytes() == again.read_bytes()
    responses = tmp_path / "r.jsonl"
    assert solve_file(generator, instances=instances, output=responses) == 50
    summary = score_file(generator, validator, instances=instances, responses=responses, output=tmp_path / "v.jsonl")
    assert summary.overall.valid_rate == 1.0
    assert set(summary.by["group"]) <= {"small", "large"}  # a task that declares no groupings: its group() under "group"
    # a wrong answer is counted under its failure type
    lines = [json.loads(line) for line in responses.read_text().splitlines()]
    lines[0]["response"] = "nope"
    responses.write_text("".join(json.dumps(line) + "\n" for line in lines))
    summary = score_file(generator, validator, instances=instances, responses=responses, output=tmp_path / "v.jsonl")
    assert summary.overall.failures["wrong"] == 1
    projection = generator.project({"max_value": 500}, generator.default_config())
    assert projection.config.max_value == 99 and projection.changes[0].field == "max_value"
    assert generator.render({"value": 3}, "compact") == "Say 3"


def test_cli_paths_work_for_the_toy_task(pm, tmp_path, monkeypatch):
    import envengineer.registry
    from envengineer.cli import commands as cli

    registry = _registry(pm)
    monkeypatch.setattr(envengineer.registry, "load_registry", lambda *a, **k: registry)  # what the commands' state builds
    runner = CliRunner()
    inst, resp, verd = tmp_path / "i.jsonl", tmp_path / "r.jsonl", tmp_path / "v.jsonl"
    result = runner.invoke(cli.app, ["generate", "toy-echo", "--n", "20", "--seed", "1", "--output", str(inst)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli.app, ["solve", "toy-echo", "--instances", str(inst), "--output", str(resp)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli.app, ["score", "toy-echo", "--instances", str(inst), "--responses", str(resp), "--output", str(verd)])
    assert result.exit_code == 0, result.output
    assert "100.0%" in result.output
    assert len(verd.read_text().splitlines()) == 20
