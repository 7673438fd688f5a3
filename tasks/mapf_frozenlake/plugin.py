"""Registers the mapf-frozenlake generator, validator and frozen benchmarks."""

from __future__ import annotations

from envengineer.api import hookimpl
from envengineer.tasks.mapf_frozenlake.benchmarks import specs
from envengineer.tasks.mapf_frozenlake.generator import MapfGenerator
from envengineer.tasks.mapf_frozenlake.validator import MapfValidator


@hookimpl
def register_generators(register):
    register(MapfGenerator)


@hookimpl
def register_validators(register):
    register(MapfValidator)


@hookimpl
def register_benchmarks(register):
    for spec in specs():
        register(spec)
