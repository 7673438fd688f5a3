"""Registers the grid-walk generator, validator and frozen benchmarks."""

from __future__ import annotations

from envengineer.api import hookimpl
from envengineer.tasks.gridwalk.benchmarks import specs
from envengineer.tasks.gridwalk.generator import GridWalkGenerator
from envengineer.tasks.gridwalk.validator import GridWalkValidator


@hookimpl
def register_generators(register):
    register(GridWalkGenerator)


@hookimpl
def register_validators(register):
    register(GridWalkValidator)


@hookimpl
def register_benchmarks(register):
    for spec in specs():
        register(spec)
