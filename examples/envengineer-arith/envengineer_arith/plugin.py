"""The hook implementations: what the arith family registers (the entry point in pyproject.toml names this module)."""

from __future__ import annotations

from envengineer import hookimpl

from envengineer_arith.benchmarks import specs
from envengineer_arith.generator import ArithGenerator
from envengineer_arith.validator import ArithValidator


@hookimpl
def register_benchmarks(register):
    for spec in specs():
        register(spec)


@hookimpl
def register_generators(register):
    register(ArithGenerator)


@hookimpl
def register_validators(register):
    register(ArithValidator)
