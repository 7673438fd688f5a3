"""The component kinds plugins register, and the small value types they exchange.

Every component is a class with a ``name`` and an ``Options`` pydantic model (its section of the run
config): :mod:`~envengineer.components.base`. A task family is split in two, a ``Generator`` and a
``Validator`` paired by name (:mod:`~envengineer.components.task`); the loop's components are context
modules, engineers, trainers, policies and trackers (:mod:`~envengineer.components.roles`). The
declarations a task makes (knobs, groupings, benchmarks, verdicts) are
:mod:`~envengineer.components.declarations`; training's and the resources a component reports (model
shapes, memory estimates, GPUs) have modules of their own here; the engineer's contract (``DesignRequest``,
``EngineerReply``) is :mod:`envengineer.design.contract`, one layer up, since a request holds evidence read
from the run directory.

This package is the lowest layer of the core: it imports nothing of envengineer but
:mod:`envengineer.errors` and :mod:`envengineer.fileio`.
"""

from envengineer.components.base import Component, NoOptions, retired_options
from envengineer.components.declarations import (
    METRIC_RATES,
    Aggregate,
    Benchmark,
    Change,
    GenerationResult,
    Grouping,
    Knob,
    Projection,
    Verdict,
    prompt_text,
)
from envengineer.components.roles import (
    ContextModule,
    Engineer,
    Policy,
    Resources,
    Tracker,
    TrackerUnavailable,
    Trainer,
    missing_package,
)
from envengineer.components.task import Generator, Validator

#: The kinds of component the registry holds, each -> the base class a registered one must subclass
#: (benchmarks are instances, not classes: :class:`Benchmark`).
KINDS: dict[str, type[Component]] = {
    "generator": Generator,
    "validator": Validator,
    "context_module": ContextModule,
    "engineer": Engineer,
    "trainer": Trainer,
    "policy": Policy,
}

__all__ = [
    "KINDS", "METRIC_RATES", "Aggregate", "Benchmark", "Change", "Component", "ContextModule", "Engineer",
    "GenerationResult", "Generator", "Grouping", "Knob", "NoOptions", "Policy", "Projection", "Resources",
    "Tracker", "TrackerUnavailable", "Trainer", "Validator", "Verdict", "missing_package", "prompt_text",
    "retired_options",
]
