"""The conformance kit (envengineer.testing) passes on the built-in MAPF family and on the arith example,
and catches a family that breaks each rule."""

import sys
from pathlib import Path
from typing import ClassVar

import pytest

from envengineer.testing import assert_task_conforms, check_projection, check_validator, fuzz_proposals

ARITH = Path(__file__).resolve().parents[1] / "examples" / "envengineer-arith"


@pytest.fixture()
def arith_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(ARITH))
    monkeypatch.setenv("PYTHONPATH", str(ARITH))
    yield
    for name in [m for m in sys.modules if m == "envengineer_arith" or m.startswith("envengineer_arith.")]:
        sys.modules.pop(name)


def test_mapf_conforms():
    assert_task_conforms("mapf-frozenlake", {"agents": 2}, n=12, fuzz=150)


def test_the_arith_example_conforms(arith_on_path):
    assert_task_conforms("arith", plugins=["envengineer_arith.plugin"], n=24, fuzz=300)


def test_the_kit_catches_a_family_that_breaks_the_rules(arith_on_path):
    from envengineer.components import Verdict
    from envengineer.testing import load_task

    generator, validator = load_task("arith", plugins=["envengineer_arith.plugin"])

    class Raises(type(generator)):
        def project(self, proposal, current):
            return super().project(dict(proposal), current)  # dict(None), dict(42) ... raise

    problems = check_projection(Raises(generator.options), count=20)
    assert problems and "raised" in problems[0] and "fuzz_proposals" in problems[0]

    class Evaluates(type(validator)):
        failure_types: ClassVar[tuple[str, ...]] = ("wrong",)

        def score(self, record, response):
            if response.startswith("__import__"):
                eval(response)  # noqa: S307 - the unsafe validator the kit must catch
            return Verdict(valid=False, optimal=False, failure="boom")

    records = generator.generate(generator.default_config(), n=2, seed=0).records
    problems = check_validator(generator, Evaluates(), records)
    assert any("executed the answer" in p for p in problems)
    assert any("'boom' is not one of the declared failure types" in p for p in problems)


def test_fuzzing_is_seeded(arith_on_path):
    from envengineer.testing import load_task

    generator, _ = load_task("arith", plugins=["envengineer_arith.plugin"])
    config = generator.default_config()
    assert repr(fuzz_proposals(generator, config, 50, 3)) == repr(fuzz_proposals(generator, config, 50, 3))
    assert repr(fuzz_proposals(generator, config, 50, 3)) != repr(fuzz_proposals(generator, config, 50, 4))


def test_the_kit_fails_a_family_whose_generator_ignores_its_knobs(arith_on_path):
    """The records look valid, but the engineer's designs would do nothing: each knob at its bounds must change
    what is generated (issue 44). A generator that always generates from its default config fails, naming every
    knob; the honest generator passes the same check."""
    from envengineer.testing import check_knobs_reach_records, load_task

    generator, _ = load_task("arith", plugins=["envengineer_arith.plugin"])
    assert check_knobs_reach_records(generator, n=24) == []

    class IgnoresItsConfig(type(generator)):
        def generate(self, config, *, n, seed, **kwargs):
            return super().generate(self.default_config(), n=n, seed=seed, **kwargs)

    problems = check_knobs_reach_records(IgnoresItsConfig(generator.options), n=24)
    knobs = {k.name for k in generator.knobs}
    assert len(problems) == len(knobs) and all("gave identical records" in p for p in problems), problems
    assert {name for name in knobs if any(f"knob {name!r}" in p for p in problems)} == knobs
