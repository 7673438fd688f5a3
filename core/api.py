"""The public plugin API: everything a plugin author imports, from one place.

A task family, an engineer, a context module, a trainer, a policy or a tracker needs only::

    from envengineer.api import Generator, Validator, Verdict, Grouping, Knob, hookimpl, ...

Names here are stable across minor releases; the modules they come from may move. The
extension points themselves (the hooks a plugin implements) are documented in
:mod:`envengineer.hookspecs`.
"""

from envengineer.benchmarks import read_checksums
from envengineer.components import (
    Aggregate,
    Benchmark,
    Change,
    Component,
    ContextModule,
    Engineer,
    GenerationResult,
    Generator,
    Grouping,
    Knob,
    NoOptions,
    Policy,
    Projection,
    Resources,
    Trainer,
    Validator,
    Verdict,
    retired_options,
)
from envengineer.contract import DesignOutcome, DesignRequest, EngineerCallError, EngineerReply
from envengineer.doctor import Check
from envengineer.errors import ConfigError, EnvEngineerError, InputError
from envengineer.evidence import Evidence, RoundRecord
from envengineer.fileio import atomic_open, read_jsonl, write_json, write_jsonl, write_text, write_yaml
from envengineer.hookspecs import hookimpl
from envengineer.memory import Fix, MemoryEstimate
from envengineer.model_shape import ModelShape
from envengineer.prompts import build_request, factual_note, load_prompt, summary_prompt
from envengineer.proposals import UnusableProposal, extract_yaml_block, parse_proposal
from envengineer.rundir import RunDir
from envengineer.trackers import Tracker, TrackerUnavailable
from envengineer.training import CURVE_KEYS, TrainRequest, TrainResult

__all__ = [
    "Aggregate", "Benchmark", "CURVE_KEYS", "Change", "Check", "Component", "ConfigError", "ContextModule", "DesignOutcome",
    "DesignRequest", "EnvEngineerError", "Engineer", "EngineerCallError", "EngineerReply", "Evidence", "GenerationResult",
    "Fix", "Generator", "Grouping", "InputError", "Knob", "MemoryEstimate", "ModelShape", "NoOptions", "Policy", "Projection", "Resources",
    "RoundRecord", "RunDir",
    "Tracker", "TrackerUnavailable", "TrainRequest", "TrainResult", "Trainer", "UnusableProposal", "Validator", "Verdict", "atomic_open", "build_request",
    "extract_yaml_block", "factual_note", "hookimpl", "load_prompt", "parse_proposal", "read_checksums", "read_jsonl", "retired_options",
    "summary_prompt", "write_json", "write_jsonl", "write_text", "write_yaml",
]
