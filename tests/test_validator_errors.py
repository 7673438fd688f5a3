"""A validator that raises inside the loop stops the run with an error naming the task, the record,
the response and the command that reproduces it, not a bare traceback."""

import hashlib
import json
from typing import ClassVar

import pytest

from envengineer import hookimpl
from envengineer.components import Benchmark
from envengineer.errors import EnvEngineerError, ValidatorError
from envengineer.registry import Registry

from test_knob_declarations import WordsGenerator, WordsValidator


class RaisesGenerator(WordsGenerator):
    name: ClassVar[str] = "toy-raises"
    validation_benchmark: ClassVar[str | None] = "toy-raises-val"


class RaisesValidator(WordsValidator):
    name: ClassVar[str] = "toy-raises"

    def score(self, record, response):
        return record["g"]  # the plugin author's bug: KeyError: 'g'


def _registry(pm, tmp_path):
    records = RaisesGenerator().generate(RaisesGenerator().default_config(), n=8, seed=99).records
    path = tmp_path / "toy-raises-val.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))

    class Plugin:
        @hookimpl
        def register_generators(self, register):
            register(RaisesGenerator)

        @hookimpl
        def register_validators(self, register):
            register(RaisesValidator)

        @hookimpl
        def register_benchmarks(self, register):
            register(Benchmark(name="toy-raises-val", task="toy-raises", description="toy", path=path,
                               sha256=hashlib.sha256(path.read_bytes()).hexdigest()))

    pm.register(Plugin(), name="toy-raises")
    return Registry(pm)


def test_a_raising_validator_names_the_task_record_and_response(pm, tmp_path):
    from envengineer.loop.steps import run

    registry = _registry(pm, tmp_path)
    config = tmp_path / "toy.yaml"
    config.write_text("name: toy\nrounds: 1\nbudget: 8\ntask: {name: toy-raises}\nengineer: fixed\n"
                      "policy: simulated\ntrainer: simulated\neval: {limit: 8}\n")
    with pytest.raises(ValidatorError) as caught:
        run(config, registry=registry, output=str(tmp_path / "run"))
    message = str(caught.value)
    assert isinstance(caught.value, EnvEngineerError)
    assert "task 'toy-raises'" in message and "KeyError: 'g'" in message
    assert "record 'words-" in message and "on the response '" in message
    assert "envengineer score toy-raises --instances I.jsonl --responses R.jsonl" in message
    assert isinstance(caught.value.__cause__, KeyError)
    assert (tmp_path / "run").is_dir()  # what the run wrote before the step stays


def test_the_response_is_cut_at_80_characters():
    from envengineer.loop.evaluation import score_response

    generator = RaisesGenerator()
    record = {"id": "r1", "group": "short", "word": "ab"}
    with pytest.raises(ValidatorError, match=r"record 'r1' on the response 'x{80}…'"):
        score_response(RaisesValidator(), generator, record, "x" * 200, "full")
