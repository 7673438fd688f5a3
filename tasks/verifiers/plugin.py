"""Registers the ``verifiers`` task family: a verifiers (v1) taskset driven through its own loaders
(docs/verifiers.md).

verifiers is imported only when the family is made for a run (:func:`taskset.vf`), so this module loads, and
``envengineer plugins`` lists the family, without it. Everything the family refuses, it refuses when
it is made, before any round: each refusal names the taskset and the field, hook or judge at fault.
A frozen set of a taskset is registered by the package that runs it (:func:`benchmarks.frozen_set`).
"""

from __future__ import annotations

from envengineer.api import hookimpl
from envengineer.tasks.verifiers.generator import VFGenerator
from envengineer.tasks.verifiers.validator import VFValidator


@hookimpl
def register_generators(register):
    register(VFGenerator)


@hookimpl
def register_validators(register):
    register(VFValidator)
