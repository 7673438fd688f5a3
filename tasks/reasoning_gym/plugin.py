"""Registers the reasoning-gym generator, validator and frozen benchmarks (docs/reasoning-gym.md).

Nothing here imports reasoning_gym: ``envengineer plugins`` lists the family without it.
"""

from __future__ import annotations

from envengineer.api import hookimpl
from envengineer.tasks.reasoning_gym.benchmarks import specs
from envengineer.tasks.reasoning_gym.generator import RGGenerator
from envengineer.tasks.reasoning_gym.validator import RGValidator


@hookimpl
def register_generators(register):
    register(RGGenerator)


@hookimpl
def register_validators(register):
    register(RGValidator)


@hookimpl
def register_benchmarks(register):
    for spec in specs():
        register(spec)
